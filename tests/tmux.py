"""A terminal for the tests: a tmux server of its own (so no other test's or the
user's), one pane, read and typed into as a person would (tests/test_top.py's
agent-top, tests/test_completions.py's bash -i)."""

import subprocess

from .conftest import wait_until


class Screen:
    """What every pane does: tmux commands on its own server (`socket`), its screen,
    waiting for texts on it, keys typed, the server ended."""

    tmux = socket = None

    def _tmux(self, *args):
        return subprocess.run([self.tmux, "-S", self.socket, *args], capture_output=True,
                              text=True, check=True).stdout

    def screen(self, colours=False):
        return self._tmux("capture-pane", "-p", *(["-e"] if colours else []))

    def shows(self, *texts):
        """Wait until the screen holds every text; the screen."""
        seen = [""]

        def showing():
            seen[0] = self.screen()
            return all(t in seen[0] for t in texts) and seen[0]
        try:
            return wait_until(showing, f"the screen to show {texts}")
        except BaseException:
            print(f"the screen:\n{seen[0]}")
            raise

    def keys(self, *keys):
        self._tmux("send-keys", *keys)

    def close(self):
        subprocess.run([self.tmux, "-S", self.socket, "kill-server"], capture_output=True)
