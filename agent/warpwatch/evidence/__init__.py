"""Evidence: the traces of the windows that matter, kept for a person to open later.

- `rule`: which windows are kept, and why (pure);
- `store`: the bounded folder they are kept in (file I/O).

The service (`service.evidence`) offers each analysed window to the rule and hands the kept ones to
the store before the source may delete the trace; `serving` answers `/evidence` from the store.
"""
