"""What distlock does on Redis: the Lua scripts, the operations that run them, and how.

    lua/         one file per script, each with a header: its KEYS, ARGV, reply and effect
                 (lua/include/: fragments several scripts share)
    scripts      reads the scripts when imported; ``load(name)`` returns one
    steps        what an operation asks of the server (run a script, block on a list, ...)
                 and the drivers that run an operation on a sync or an async client
    runner       how each step runs on redis-py, sync and async side by side
    holds        a lock's holds on one server, exclusive and (with .shared) shared: keys,
                 arguments, script, reply
    semaphores   the semaphore operations, on the same conventions
    listing      the held locks, listed and read in bulk
    grants       Redlock's scripts on each of its nodes
    fanout       asking several servers at once (Redlock)
    detached     errors kept as values without reference cycles
    backend      ScriptedBackend: the backend operations, on a client a subclass supplies

An internal package: RedisBackend, DjangoRedisBackend and RedlockBackend are built on it.
"""
