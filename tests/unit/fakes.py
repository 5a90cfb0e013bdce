"""Test doubles shared by the agent tests."""


class FakeSock:
    """Records what an agent port sends."""

    def __init__(self):
        self.sent = []

    def send(self, frame):
        self.sent.append(frame)
        return len(frame)


def mac(s):
    """'02:00:..' -> 6 bytes."""
    return bytes.fromhex(s.replace(":", ""))
