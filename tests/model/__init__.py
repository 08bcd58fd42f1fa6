"""A bounded model checker of docs/protocol.md over distlock's real Lua scripts.

The scripts are loaded from their files through the project's own expansion
(distlock.backends.redis_ops.scripts) and run in fakeredis with Lua, on a virtual clock that
moves only when the checker says so: a lease, a reservation or a registration ends as a step
the checker chooses. Two or three clients follow the client rules of the document (client.py):
acquire with a wait, the BLPOP wake-up, re-run, release, extend, give up through the error
path, crash, a lost reply, try once; each with a monotonic clock of its own, which may run 1%
off the server's. An exclusive client is fair or non-fair ('!' tokens: its waiter sends the
BLPOP alone, then its acquire), alone or beside fair ones on the same name. The explorer
(explorer.py) runs every interleaving depth-first to a fixed depth, states hashed; the
invariants (invariants.py, and waking.py for the wake-ups and the non-fair rules) are checked
at every state and step, and a violation fails with the steps that led to it. mutants.py
holds small edits of the scripts that the checker must catch.

Run it by hand (deeper than CI): ``python -m tests.model --depth 14``; CI runs
tests/model/test_model.py. fakeredis is allowed here only: it is the model of the server,
never a stand-in for Redis in tests of distlock's own code.
"""
