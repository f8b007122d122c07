"""make install / make uninstall into a DESTDIR."""

import os
import subprocess
import sys

from .conftest import PROGRAMS, ROOT, make, script


def files_under(top):
    return sorted(os.path.relpath(os.path.join(d, f), top)
                  for d, _, names in os.walk(top) for f in names)


def test_install_and_uninstall(tmp_path):
    dest = tmp_path / "dest"
    where = (f"DESTDIR={dest}", "PREFIX=/usr/local")
    result = make(*where, "install")
    assert result.returncode == 0, result.stderr
    installed = files_under(dest)
    for p in PROGRAMS:
        assert f"usr/local/bin/agent-{p}" in installed
        assert f"usr/local/share/man/man1/agent-{p}.1" in installed
        assert f"usr/local/share/bash-completion/completions/agent-{p}" in installed
        assert f"usr/local/share/zsh/site-functions/_agent-{p}" in installed
        assert f"usr/local/share/fish/vendor_completions.d/agent-{p}.fish" in installed
    assert "usr/local/share/man/man5/agentctl.5" in installed
    assert "usr/local/share/man/man7/agentctl.7" in installed
    # The installed program runs from its library directory (relocated by hand here,
    # as DESTDIR is not where it will live), on a Python that has no agentctl of its own:
    # -S leaves out the site-packages of the venv, whose editable install would supply a
    # package the install left out.
    launcher = (dest / "usr/local/bin/agent-ps").read_text()
    assert '"/usr/local/lib/agentctl"' in launcher
    env = dict(os.environ, AGENTCTL_DB=str(tmp_path / "x.db"),
               PYTHONPATH=str(dest / "usr/local/lib/agentctl"))
    python = [sys.executable, "-S"]
    out = subprocess.run([*python, str(dest / "usr/local/bin/agent-ps"), "--version"],
                         env=env, capture_output=True, text=True, cwd=str(tmp_path))
    assert out.stdout == "agent-ps (agentctl) 0.1.0\n", out.stderr
    # ... and runs a turn whose tool call (a shipped tool, in its sandbox) needs every
    # package of agentctl's
    work = tmp_path / "work"
    work.mkdir()
    (work / "here.txt").write_text("x")
    model = script(tmp_path, {"steps": [
        {"content": "", "tool_calls": [{"name": "list_dir", "arguments": {}}]},
        {"content": "listed"}]})
    installed_bin = dest / "usr/local/bin"
    forked = subprocess.run([*python, str(installed_bin / "agent-fork"), "-n", "w",
                             "--allow", "list_dir", "--cwd", str(work), "-m",
                             model, "go"], env=env, capture_output=True,
                            text=True)
    assert forked.returncode == 0, forked.stderr
    ran = subprocess.run([*python, str(installed_bin / "agent-run"), "w"], env=env,
                         capture_output=True, text=True)
    assert (ran.returncode, ran.stdout) == (0, "listed\n"), ran.stderr
    replay = subprocess.run([*python, str(installed_bin / "agent-replay"), "w"],
                            env=env, capture_output=True, text=True)
    assert "here.txt\t1" in replay.stdout, replay.stdout
    import shutil
    viewer = ["man", "-l"] if shutil.which("man") else ["groff", "-man", "-Tutf8"]
    page = subprocess.run(viewer + [str(dest / "usr/local/share/man/man1/agent-ps.1")],
                          env=dict(os.environ, MANPAGER="cat", PAGER="cat", MANWIDTH="80"),
                          capture_output=True, text=True)
    assert "agent-ps" in page.stdout and "SYNOPSIS" in page.stdout
    result = make(*where, "uninstall")
    assert result.returncode == 0, result.stderr
    assert files_under(dest) == []


def test_every_program_has_its_entry_point_and_no_other():
    """pyproject.toml's [project.scripts], kept by hand beside the table
    (agentctl/programs.py): agent-NAME = agentctl.cli.NAME:main for each program."""
    import tomllib
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        scripts = tomllib.load(f)["project"]["scripts"]
    assert scripts == {f"agent-{p}": f"agentctl.cli.{p}:main" for p in PROGRAMS}


def test_make_install_takes_the_extras_it_is_given():
    """make install EXTRAS=mcp,postgres installs those extras too (the README's
    pip install 'agentctl[mcp]' took an unrelated package of that name from the index)."""
    planned = subprocess.run(["make", "-n", "-C", ROOT, "install", "EXTRAS=mcp,postgres"],
                             capture_output=True, text=True)
    assert planned.returncode == 0, planned.stderr
    assert '--target "/usr/local/lib/agentctl" ".[mcp,postgres]"' in planned.stdout
    plain = subprocess.run(["make", "-n", "-C", ROOT, "install"], capture_output=True, text=True)
    assert '--target "/usr/local/lib/agentctl" "."' in plain.stdout
