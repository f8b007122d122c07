"""The README's pictures, made by the real programs (`make pictures`): a small tree is
built offline in a database of its own (the demo's scripted model, priced as a model
at $3 and $15 a million tokens; agents paused, stopped and held), then

  - agent-top's snapshot (agent-top | cat) becomes the block under "## Watching a tree"
    in README.md;
  - agent-ps -a --format dot, drawn by Graphviz's dot -Tsvg, becomes docs/tree.svg.

    python docs/pictures.py            rewrite both
    python docs/pictures.py --print    print the agent-top block only, change nothing

Never by hand: tests/test_top_views.py fails when the README's block has other
columns than agent-top prints."""

import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = os.path.join(ROOT, "README.md")
SVG = os.path.join(ROOT, "docs", "tree.svg")
HEADING = "## Watching a tree"
MODELS = os.path.join(ROOT, "examples", "models")


def build(tmp):
    """The tree, in a database under `tmp`; the environment its programs ran in."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AGENT", "OPENAI",
                                                                      "ANTHROPIC"))}
    env.pop("NO_COLOR", None)
    env.update(AGENTCTL_DB=os.path.join(tmp, "agents.db"), XDG_DATA_HOME=tmp,
               XDG_CONFIG_HOME=os.path.join(tmp, "config"),
               PATH=os.path.join(ROOT, "bin") + os.pathsep + env.get("PATH", ""))
    work = os.path.join(tmp, "work")
    os.mkdir(work)
    env["AGENTCTL_PRICES"] = os.path.join(tmp, "prices")
    with open(env["AGENTCTL_PRICES"], "w") as f:
        f.write("scripted:* 3 15\n")     # (dollars a million tokens: costs to show)

    def agent(*args, check=True, **extra):
        done = subprocess.run(args, env=dict(env, **extra), stdin=subprocess.DEVNULL,
                              capture_output=True, text=True)
        if check and done.returncode:
            sys.exit(f"pictures: {' '.join(args)}: {done.stderr.strip()}")
        return done.stdout

    fanout = "scripted:" + os.path.join(MODELS, "fanout.jsonl")
    agent("agent-fork", "-n", "lead", "-r", "lead", "--budget", "20000", "-m", fanout,
          "-s", "You coordinate research.", "Plan a survey of SQLite WAL internals")
    agent("agent-run", "lead")                  # it forks w-checkpoints and w-locking
    agent("agent-run", "w-checkpoints")         # a task: done, a zombie until collected
    agent("agent-send", "--from", "lead", "w-locking", "Mind the wal-index header.")
    agent("agent-fork", "-n", "reporter", "-r", "worker", "--allow",
          "write_file", "--ask", "write_file", "--cwd", work,
          "-m", "scripted:" + os.path.join(MODELS, "approval.jsonl"), "Write the report")
    agent("agent-run", "--no-prompt", "reporter")       # paused: asks to write a file
    agent("agent-fork", "-p", "lead", "-n", "fetcher", "-m", "scripted:models/gone.jsonl",
          "Fetch the WAL format page")
    agent("agent-run", "fetcher", check=False)          # its model can't be read: held
    agent("agent-fork", "-n", "idle", "-m", "echo")
    agent("agent-kill", "-s", "STOP", "idle")
    return agent


def top_block(agent):
    """agent-top's snapshot, as the README shows it (indented: a code block)."""
    return "".join("    " + line + "\n" if line else "\n"
                   for line in agent("agent-top").splitlines())


def replace_block(text, block):
    """README.md's text with the code block under HEADING made `block`."""
    head, found, rest = text.partition(HEADING + "\n")
    if not found:
        sys.exit(f"pictures: README.md has no '{HEADING}'")
    lines = rest.splitlines(keepends=True)
    start = next(i for i, line in enumerate(lines) if line.startswith("    "))
    end = start
    while end < len(lines) and (lines[end].startswith("    ") or lines[end] == "\n"
                                and end + 1 < len(lines) and lines[end + 1].startswith("    ")):
        end += 1
    return head + found + "".join(lines[:start]) + block + "".join(lines[end:])


def main(argv):
    tmp = tempfile.mkdtemp(prefix="pictures")
    try:
        agent = build(tmp)
        block = top_block(agent)
        if argv[1:] == ["--print"]:
            sys.stdout.write(block)
            return 0
        dot = agent("agent-ps", "-a", "--format", "dot")
        if shutil.which("dot") is None:
            sys.exit("pictures: dot not found: install Graphviz")
        svg = subprocess.run(["dot", "-Tsvg"], input=dot, capture_output=True, text=True,
                             check=True).stdout
        with open(SVG, "w") as f:
            f.write(svg)
        with open(README) as f:
            text = f.read()
        with open(README, "w") as f:
            f.write(replace_block(text, block))
        print(f"pictures: {os.path.relpath(README)} and {os.path.relpath(SVG)} made again")
        return 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
