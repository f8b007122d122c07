"""Copy-on-write workspaces (agentctl(7), WORKSPACES): an agent whose working directory
is layered sees it through an overlay of its own layer on the frozen layers of its
lineage and the real directory. `layers.py`: the stack and its records, a fork's
layers; `mount.py`: the overlay mounted where a call's bwrap starts; `view.py`: what
a stack shows and what an agent changed, read from the layers' files."""
