"""Small edits of the scripts that break a promise: the checker must catch each one (its
self-test). Each names the configuration that shows it."""

from __future__ import annotations

import dataclasses

from .server import Edit


@dataclasses.dataclass(frozen=True)
class Mutant:
    name: str
    edit: Edit
    config: str  # a key of config.CONFIGS


# Kept alike (duplicates pairs the entries by shape): each is one record of the same three
# fields, an edit and where it shows; the table is data, and the checker runs it once.
MUTANTS = (
    Mutant(
        "a held lock is taken over (its value not looked at)",
        Edit(
            "acquire.lua",
            "if value and reserved ~= ARGV[1] then",
            "if reserved and reserved ~= ARGV[1] then",
        ),
        "exclusive",
    ),
    Mutant(
        "a reservation is taken by another waiter",
        Edit("acquire.lua", "if value and reserved ~= ARGV[1] then", "if holder then"),
        "exclusive3",
    ),
    Mutant(
        "a release hands the lock to the last waiter",
        Edit(
            "include/hand_over.lua",
            "redis.call('ZRANGE', KEYS[2], 0, 15)",
            "redis.call('ZREVRANGE', KEYS[2], 0, 15)",
        ),
        "exclusive3",
    ),
    Mutant(
        "a release by a token that does not hold the lock deletes it",
        Edit("release.lua", "if ARGV[1] ~= '' and string.sub", "if false and string.sub"),
        "exclusive",
    ),
    Mutant(
        "the queue keys outlive every registration (no TTL)",
        Edit(
            "acquire.lua",
            "if not queue_exists or redis.call('PTTL', KEYS[3]) < patience then",
            "if false then",
        ),
        "exclusive",
    ),
    Mutant(
        "a claimed reservation is held without a lease",
        Edit(
            "include/take.lua",
            "redis.call('PSETEX', KEYS[1], ARGV[2], held_value)",
            "redis.call('SET', KEYS[1], held_value)",
        ),
        "exclusive",
    ),
    Mutant(
        "a lapsed lease goes to whoever asks first, not to the queue's head",
        Edit("include/lapsed.lua", "if lock_gone then", "if false then"),
        "exclusive3",
    ),
    # Issue 42's lean calls send no grace: the scripts' default is what every handoff gets.
    Mutant(
        "release.lua without the grace's default (a lean release hands nothing on)",
        Edit("release.lua", "local grace = ARGV[4] or '250'", "local grace = ARGV[4]"),
        "exclusive3",
    ),
    Mutant(
        "leave_queue.lua without the grace's default (a lean leave hands nothing on)",
        Edit("leave_queue.lua", "local grace = ARGV[2] or '250'", "local grace = ARGV[2]"),
        "exclusive3",
    ),
    Mutant(
        "lapsed.lua without the grace's default (a lean acquire hands no lapsed lock on)",
        Edit("include/lapsed.lua", "local grace = ARGV[7] or '250'", "local grace = ARGV[7]"),
        "exclusive3",
    ),
    # Non-fair locks: each shows only where a '!' token acts.
    Mutant(
        "a non-fair release wakes nobody (wake_head.lua pushes nothing)",
        Edit(
            "include/wake_head.lua",
            "if redis.call('EXISTS', KEYS[2] .. ':' .. waiter) == 0 then",
            "if false then",
        ),
        "nonfair",
    ),
    Mutant(
        "a non-fair release wakes the last waiter, not the head",
        Edit(
            "include/wake_head.lua",
            "redis.call('ZRANGE', KEYS[2], 0, 15)",
            "redis.call('ZREVRANGE', KEYS[2], 0, 15)",
        ),
        "mixed3",
    ),
    Mutant(
        "a non-fair acquirer takes a lock reserved for a waiter",
        Edit(
            "acquire.lua",
            "if value and reserved ~= ARGV[1] then",
            "if value and reserved ~= ARGV[1]"
            " and not (reserved and string.sub(ARGV[1], 1, 1) == '!') then",
        ),
        "mixed3",
    ),
    Mutant(
        "a non-fair release hands the lock over instead of waking the head",
        Edit("release.lua", "if string.sub(value, 1, 1) == '!' then", "if false then"),
        "nonfair",
    ),
    Mutant(
        "a non-fair acquirer hands a free lock to the queue's head instead of taking it",
        Edit("include/lapsed.lua", "and string.sub(ARGV[1], 1, 1) ~= '!'", "and true"),
        "nonfair",
    ),
    Mutant(
        "leave_queue does not wake the head of a free lock",
        Edit("leave_queue.lua", "elseif not value then", "elseif false then"),
        "mixed3",
    ),
    Mutant(
        "a reader joins while a writer holds the lock",
        Edit("shared_acquire.lua", "if not value then", "if true then"),
        "shared",
    ),
    Mutant(
        "a semaphore lets one more holder in than its limit",
        Edit("semaphore_acquire.lua", ">= limit then", "> limit then"),
        "semaphore",
    ),
)
