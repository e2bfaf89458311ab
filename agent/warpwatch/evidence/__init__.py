"""Evidence: the traces of the windows that matter, kept for a person to open later.

- `rule`: which windows are kept, and why (pure);
- `store`: the bounded folder they are kept in (file I/O);
- `keeper`: the one worker thread, behind a bounded queue, that copies them in off the round.

The service (`service.keeping`) offers each analysed window to the rule and hands the kept ones to
the keeper; the source gets the trace back (may delete it) once it is copied. `serving` answers
`/evidence` from the store.
"""
