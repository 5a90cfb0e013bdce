"""`emu lab`: the book's experiments as runs with a story, an event timeline and a verdict
(docs/LABS.md)."""
