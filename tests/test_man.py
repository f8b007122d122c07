"""The man pages: they render without a warning, every program has one with
the sections a reader expects, and every option of every program is in its
page's OPTIONS section (so an option added to the code without its page
fails here)."""

import glob
import os
import re
import shutil
import subprocess
from importlib import import_module

import click
import pytest

from .conftest import PROGRAMS, ROOT

MAN = os.path.join(ROOT, "man")
PAGES = sorted(glob.glob(os.path.join(MAN, "*.[157]")))
REQUIRED = ("NAME", "SYNOPSIS", "DESCRIPTION", "OPTIONS", "EXIT STATUS", "ENVIRONMENT",
            "EXAMPLES", "SEE ALSO")
OVERVIEW_REQUIRED = {"agentctl.5": REQUIRED,
                     "agentctl.7": REQUIRED + ("GUARANTEES",)}
# groff's -Tutf8 may turn '-' into a hyphen and '\-' into a minus sign.
DASHES = str.maketrans({"\u2010": "-", "\u2011": "-", "\u2212": "-", "\u2013": "-"})
OPTION = re.compile(r"(?<![\w-])(--?[A-Za-z0-9][\w-]*)")


def documented_programs():
    """The programs of conftest.PROGRAMS that exist as agentctl/cli/<name>.py."""
    return [name for name in PROGRAMS
            if os.path.exists(os.path.join(ROOT, "agentctl", "cli", f"{name}.py"))]


def formatter():
    """The command that renders a page; groff, else mandoc. Neither is a failure:
    the pages are part of the product."""
    groff = shutil.which("groff") or ("/usr/bin/groff" if os.access("/usr/bin/groff", os.X_OK)
                                      else None)
    if groff:
        return "groff", groff
    mandoc = shutil.which("mandoc")
    if mandoc:
        return "mandoc", mandoc
    pytest.fail("neither groff nor mandoc is installed: install groff "
                "(apt-get install groff, dnf install groff, brew install groff) "
                "to check the man pages")


def run_formatter(args, page):
    env = dict(os.environ)
    env.pop("GROFF_SGR", None)
    proc = subprocess.run(args + [page], capture_output=True, env=env, timeout=60)
    return proc.returncode, proc.stdout.decode("utf-8", "replace"), \
        proc.stderr.decode("utf-8", "replace")


def plain_text(page):
    """The page rendered as plain text: no bold, no underline, no escapes."""
    kind, tool = formatter()
    if kind == "groff":
        args = [tool, "-man", "-Tutf8", "-P-c", "-P-b", "-P-u"]
    else:
        args = [tool, "-man", "-Tutf8"]
    code, out, err = run_formatter(args, page)
    assert code == 0, err
    out = re.sub(r".\x08", "", out)          # any overstrike left (mandoc)
    out = re.sub(r"\x1b\[[0-9;]*m", "", out)  # any SGR left
    return out.translate(DASHES)


def sections(text):
    """{heading: body} of a rendered page: headings are the unindented
    upper-case lines."""
    found, current = {}, None
    for line in text.splitlines():
        if re.fullmatch(r"[A-Z][A-Z0-9 ]*[A-Z0-9]", line.rstrip()):
            current = line.strip()
            found[current] = ""
        elif current is not None:
            found[current] += line + "\n"
    return found


def roff_text(line):
    """A roff line as the words it prints: macro names, quotes and font
    escapes gone, \\- as -."""
    if line.startswith("."):
        macro, _, rest = line.partition(" ")
        # alternating-font macros join their arguments without spaces
        words = re.findall(r'"((?:[^"]|"")*)"|(\S+)', rest)
        parts = [a or b for a, b in words]
        line = "".join(parts) if macro[1:] in ("BR", "RB", "BI", "IB", "IR", "RI") \
            else " ".join(parts)
    line = re.sub(r"\\f(\[[^]]*\]|\(..|.)", "", line)
    line = line.replace("\\-", "-").replace("\\&", "").replace("\\ ", " ").replace("\\~", " ")
    return line


def option_tags(page):
    """The options named in the tags of the OPTIONS section's .TP entries."""
    with open(page, encoding="utf-8") as f:
        lines = f.read().splitlines()
    tags, inside = [], False
    for i, line in enumerate(lines):
        if line.startswith(".SH"):
            inside = line.split(None, 1)[1].strip('"') == "OPTIONS" if " " in line else False
        elif inside and line.startswith(".TP") and i + 1 < len(lines):
            tags.append(roff_text(lines[i + 1]))
    return {option for tag in tags for option in OPTION.findall(tag)}


def click_options(name):
    """Every spelling of every option of agent-<name>, --help included (click
    adds it at run time, under the names of the command's context settings)."""
    command = import_module(f"agentctl.cli.{name}").cli
    context = click.Context(command, info_name=f"agent-{name}", **command.context_settings)
    opts = set()
    for param in command.get_params(context):
        if isinstance(param, click.Option):
            opts.update(param.opts)
            opts.update(param.secondary_opts)
    # a program with commands (agent-doc put ...): theirs too, on the same page
    for sub in getattr(command, "commands", {}).values():
        sub_context = click.Context(sub, info_name=sub.name, parent=context)
        opts.update(o for p in sub.get_params(sub_context) if isinstance(p, click.Option)
                    for o in p.opts + p.secondary_opts)
    return opts


def page_of(name):
    return os.path.join(MAN, f"agent-{name}.1")


def test_there_are_pages():
    assert PAGES, "no man pages in man/"
    names = {os.path.basename(p) for p in PAGES}
    assert {"agentctl.5", "agentctl.7"} <= names


@pytest.mark.parametrize("page", PAGES, ids=os.path.basename)
def test_no_control_character_but_newline(page):
    """A Python escape written into a page (\\f as a form feed) is no roff: some groffs
    say nothing of it, and the page shows garbage."""
    with open(page, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            bad = [c for c in line.rstrip("\n") if ord(c) < 32 and c != "\t"]
            assert not bad, f"{os.path.basename(page)}:{number}: control character {bad[0]!r}"


@pytest.mark.parametrize("page", PAGES, ids=os.path.basename)
def test_renders_without_warnings(page):
    kind, tool = formatter()
    if kind == "groff":
        code, out, err = run_formatter([tool, "-man", "-Tutf8", "-ww", "-z"], page)
        assert (code, err) == (0, ""), f"{os.path.basename(page)}:\n{err}"
        code, out, err = run_formatter([tool, "-man", "-Tutf8", "-ww"], page)
    else:
        code, out, err = run_formatter([tool, "-man", "-Tutf8", "-Wwarning"], page)
    assert (code, err) == (0, ""), f"{os.path.basename(page)}:\n{err}"
    assert out.strip(), f"{os.path.basename(page)} renders as nothing"


@pytest.mark.parametrize("name", documented_programs())
def test_every_program_has_a_page(name):
    assert os.path.exists(page_of(name)), f"agent-{name} has no man page: man/agent-{name}.1"


def test_the_program_pages_are_the_programs():
    """man/agent-NAME.1 for each program of the table (agentctl/programs.py), and no other."""
    assert sorted(os.path.basename(p) for p in glob.glob(os.path.join(MAN, "agent-*"))) == \
        sorted(f"agent-{p}.1" for p in PROGRAMS)


@pytest.mark.parametrize("page", PAGES, ids=os.path.basename)
def test_required_sections(page):
    base = os.path.basename(page)
    required = OVERVIEW_REQUIRED.get(base, REQUIRED)
    found = sections(plain_text(page))
    missing = [s for s in required if s not in found]
    assert not missing, f"{base} lacks {', '.join(missing)}"
    assert all(found[s].strip() for s in required), f"{base}: an empty section"


@pytest.mark.parametrize("name", [n for n in documented_programs()
                                  if os.path.exists(page_of(n))])
def test_every_option_is_documented(name):
    page = page_of(name)
    wanted = click_options(name)
    assert {"--help", "-h", "--version", "--db"} <= wanted
    # each option is the tag of an entry of OPTIONS ...
    tagged = option_tags(page)
    missing = sorted(wanted - tagged)
    assert not missing, f"agent-{name}.1: OPTIONS has no entry for {', '.join(missing)}"
    stale = sorted(tagged - wanted)
    assert not stale, f"agent-{name}.1: OPTIONS documents {', '.join(stale)}, " \
                      f"which agent-{name} does not have"
    # ... and shows as such in the rendered section
    options_text = sections(plain_text(page)).get("OPTIONS", "")
    unseen = sorted(o for o in wanted
                    if not re.search(rf"(?<![\w-]){re.escape(o)}(?![\w-])", options_text))
    assert not unseen, f"agent-{name}.1: {', '.join(unseen)} not in the rendered OPTIONS"


def option_groups(name):
    """Each option of agent-<name> (and of its commands) as the set of its spellings."""
    command = import_module(f"agentctl.cli.{name}").cli
    context = click.Context(command, info_name=f"agent-{name}", **command.context_settings)
    commands = [(command, context)] + [
        (sub, click.Context(sub, info_name=sub.name, parent=context))
        for sub in getattr(command, "commands", {}).values()]
    return [set(p.opts + p.secondary_opts) for c, ctx in commands for p in c.get_params(ctx)
            if isinstance(p, click.Option)]


@pytest.mark.parametrize("name", [n for n in documented_programs()
                                  if os.path.exists(page_of(n))])
def test_the_synopsis_names_every_option(name):
    """What --help and OPTIONS list, SYNOPSIS shows, in one of its spellings
    (the options every program has are in agentctl(7))."""
    synopsis = sections(plain_text(page_of(name)))["SYNOPSIS"]
    shown = set(OPTION.findall(synopsis))
    missing = [sorted(group) for group in option_groups(name)
               if not group & ({"--db", "--version", "--help"} | shown)]
    assert not missing, f"agent-{name}.1: SYNOPSIS lacks {missing}"


@pytest.mark.parametrize("name", [n for n in documented_programs()
                                  if os.path.exists(page_of(n))])
def test_title_and_name_match_the_program(name):
    with open(page_of(name), encoding="utf-8") as f:
        text = f.read()
    assert re.search(rf"^\.TH AGENT-{name.upper()} 1 ", text, re.M)
    assert re.search(rf"^\.SH NAME\nagent-{name} \\- \S", text, re.M)


def documented_columns(page):
    """The column keys a page's Columns section lists, one `.TP` entry each."""
    text = open(os.path.join(MAN, page)).read()
    section = text.split(".SS Columns\n", 1)[1]
    section = re.split(r"^\.S[SH] ", section, flags=re.M)[0]
    return re.findall(r"^\.TP\n\.BR? (\w+)", section, flags=re.M)


def test_the_columns_pages_list_are_those_the_programs_have():
    """agent-ps(1) once documented an `exit` column, and used it in an example,
    that the program did not have."""
    from agentctl.cli import ps
    from agentctl.cli import exited, mail
    assert documented_columns("agent-ps.1") == [c.key for c in ps.COLUMNS] + ["depth"]
    assert documented_columns("agent-mail.1") == [c.key for c in mail._columns()]
    assert documented_columns("agent-wait.1") == [c.key for c in exited.COLUMNS]


@pytest.mark.sqlite_only
def test_agentctl_5_lists_every_index(conn):
    """The schema is a public interface: every index it has is documented."""
    text = open(os.path.join(MAN, "agentctl.5")).read().split(".SS Indexes\n", 1)[1]
    text = re.split(r"^\.S[SH] ", text, flags=re.M)[0]
    documented = set(re.findall(r"\b([a-z]+_[a-z_]+)\b", text))
    actual = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'index' "
                                         "AND name NOT LIKE 'sqlite_%' AND name NOT LIKE "
                                         "'idx__sqlite_migrations%'")}
    assert actual <= documented, sorted(actual - documented)
