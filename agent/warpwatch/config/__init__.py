"""The agent's settings (a foundation: every room may import it, it imports no room).

- `table`: the one settings table, `SETTINGS`, and the frozen `Config` it describes;
- `load`: flags, environment and file into a validated `Config`;
- `units`: values as people write them (durations, sizes, booleans, lists) and the checks of a
  setting's bounds.
"""
