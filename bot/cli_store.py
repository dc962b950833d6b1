"""The ``my-agent`` commands that read the conversation store, and how each opens the
services for one command, then closes them (:func:`_with_services`): ``conversations``
here; ``search`` is :mod:`bot.cli_search`, and ``reindex``, which rebuilds the store,
:mod:`bot.cli_reindex`."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from typing import Any

from bot import exitcodes, store_lock
from bot.cli_common import command_config, print_json, print_text, setup_logging
from bot.config import AppConfig
from bot.identity import OwnerIdentities

log = logging.getLogger("my_agent.cli")


async def _with_services(
    config: AppConfig,
    fn: Any,
    recover_now: bool = True,
    download_models: bool = False,
    maintenance: bool = True,
) -> Any:
    """``fn(services)`` on services opened for one command. One-shot commands do not
    download an embedding model (offline, fastembed's retries took ~40 s): they use
    ``embedding.model_path`` or the model cache; the daemon is the one that downloads.
    ``maintenance``: hold the store's maintenance lock shared (``reindex``, which holds it
    exclusively itself, passes False; :mod:`bot.store_lock`)."""
    from bot.health_daemon import data_dir_unreadable

    unreadable = data_dir_unreadable(config.data_dir)
    if unreadable:
        # Reading commands never create a data directory: with a wrong path (a typo, the
        # wrong config) they answered "nothing here" and left an empty store behind.
        print(f"my-agent: {unreadable}", file=sys.stderr)
        return exitcodes.EX_DATADIR
    lock: int | None = None
    if maintenance:
        try:
            lock = store_lock.try_lock(config.data_dir, exclusive=False)
        except OSError as exc:  # a directory this user may read but not write: no lock
            log.debug("no maintenance lock in %s: %s", config.data_dir, exc)
        else:
            if lock is None:
                # its index is deleted and half rebuilt: a search would find nothing
                print(
                    f"my-agent: a reindex is rebuilding the index of {config.data_dir}: "
                    "try again once it has ended",
                    file=sys.stderr,
                )
                return exitcodes.EX_TEMPFAIL
    try:
        return await _open_and_run(config, fn, recover_now, download_models)
    finally:
        store_lock.release(lock)


async def _open_and_run(
    config: AppConfig, fn: Any, recover_now: bool, download_models: bool
) -> Any:
    from bot.index_rescue import is_corruption, is_storage_refusal
    from bot.service_data_dir import DataDirError, DataDirFull, full_disk_write
    from bot.service_databases import state_damage
    from bot.services import DatabaseOpenError, close_services, open_services

    # A command delivers no message: the ref filter (a read of every ref) would only
    # cost it time, 1.8 s of a 3.5 s `conversations list` at 10,000.
    options: dict[str, Any] = {
        "recover_now": recover_now,
        "download_models": download_models,
        "load_refs": False,
    }
    read_only = False
    try:
        try:
            services = await open_services(config, **options)
        except DataDirFull as full:
            # A full disk: read the store as it is when nothing is to be written (before
            # session 42 exit 73, however little there was to catch up); DataDirFull
            # again, saying so, when the index must be written first.
            log.info("%s; reading the store as it is", full)
            read_only = True
            services = await open_services(config, **options, read_only=True)
    except (DataDirError, DatabaseOpenError) as exc:
        # the message names the file and the remedy; a traceback (exit 1) hid it
        print(f"my-agent: {exc}", file=sys.stderr)
        return exitcodes.EX_DATADIR if isinstance(exc, DataDirError) else exitcodes.EX_DATABASE
    try:
        return await fn(services)
    except Exception as exc:
        # Damage the open did not read (a page only this command's query reached) was
        # "internal error" (exit 70), a bug's exit, naming no file (before session 27;
        # in state.db, before session 40).
        damaged = state_damage(services.state, exc)
        if damaged is not None:
            print(f"my-agent: {damaged}", file=sys.stderr)
            return exitcodes.EX_DATABASE
        if read_only and is_storage_refusal(exc):  # the command itself would write
            print(f"my-agent: {full_disk_write(config, exc)}", file=sys.stderr)
            return exitcodes.EX_DATADIR
        if services.index_db.damage is None or not is_corruption(exc):
            raise
        print(
            f"my-agent: {services.index_db.path} is damaged ({exc}): stop my-agent and run"
            " `my-agent reindex` to rebuild it from the transcripts",
            file=sys.stderr,
        )
        return exitcodes.EX_DATABASE
    finally:
        # The third parties' journal first: a daemon waiting for the transcript journal
        # (bot.store_lock) took it the moment close_services let it go, found this one
        # still held and ran with its third-party files unjournaled until restarted.
        await asyncio.to_thread(services.external.close)
        await close_services(services)


def unknown_channel(config: AppConfig, args: argparse.Namespace) -> str | None:
    """The usage error for a ``--channel`` that names no channel, else None. A typo
    (``--channel telgram``) listed nothing and exited 0, as if there were nothing there.
    Every channel the option takes is listed, as ``--help`` lists them: before session
    41 ``loopback`` (the scripts' ingress, whose conversations are stored as any) was
    accepted and in the help, but left out of this list. (The chat's ``/search`` and the
    API offer the owner's channels alone: :data:`bot.command_search.OWNER_CHANNELS`.)"""
    known = tuple(type(config.channels).model_fields)
    if args.channel is None or args.channel.strip().lower() in known:
        return None
    return f"--channel {args.channel!r} is not a channel (one of {', '.join(known)})"


def reading_config(args: argparse.Namespace, command: str) -> AppConfig | None:
    """The config of ``my-agent COMMAND``, a command that reads the store (logging at
    WARNING); None, the usage error said, when its ``--channel`` names no channel."""
    config = command_config(args, secrets=False)
    setup_logging("WARNING")
    wrong = unknown_channel(config, args)
    if wrong:
        print(f"my-agent {command}: {wrong}", file=sys.stderr)
        return None
    return config


def cmd_conversations(args: argparse.Namespace) -> int:
    config = reading_config(args, "conversations")
    if config is None:
        return exitcodes.EX_USAGE

    from bot.labels import shown_names
    from bot.owner_days import local_moment, owner_zone

    zone = owner_zone(config)

    def when(stamp: Any) -> str:
        """A stored UTC time as the owner's local minute with the zone's abbreviation
        (``2026-03-01 20:30 CET``). Printed as UTC, it was read as local time and put
        evenings west of UTC on the next day; printed bare, a server's owner could not
        tell whose clock it was (owner.timezone's, not the machine's)."""
        text = str(stamp or "")
        moment = local_moment(text, zone)
        if moment is None:
            return text[:16].replace("T", " ")
        return moment.strftime("%Y-%m-%d %H:%M %Z")

    async def _list(s: Any) -> int:
        records = await s.conversations.list(channel=args.channel, limit=args.limit)
        if args.json:
            print_json([r.to_meta() for r in records])
            return 0
        if not records:
            # Nothing printed and exit 0 read like a command that did not run; the data
            # directory named tells a wrong --config or working directory at once.
            where = f" on {args.channel.strip().lower()}" if args.channel else ""
            print(f"no conversations{where} in {config.data_dir}", file=sys.stderr)
        # named as the dashboard lists them (an unnamed mail thread by its sender and
        # subject: every one was "New conversation" before session 41)
        names = await shown_names(s, records)
        for r in records:
            # a column of its own: " pinned" pushed those rows' titles 7 columns right,
            # and "1 turns" read as a typo
            turns = f"{r.turn_count:>4} {'turn ' if r.turn_count == 1 else 'turns'}"
            print_text(
                f"{r.id}  {r.channel:<9} {when(r.updated):<21} {turns} "
                f"{'pinned' if r.pinned else '':<6}  {names[r.id]}"
            )
        return 0

    async def _show(s: Any) -> int:
        rec = await s.conversations.get(args.id)
        if rec is None:
            print(f"no conversation {args.id}", file=sys.stderr)
            return 1
        lines = s.store.read_lines(args.id)
        if args.json:
            print_json(
                {"conversation": rec.to_meta(), "abbreviation": rec.abbreviation, "lines": lines}
            )
            return 0
        name = (await shown_names(s, [rec]))[rec.id]
        print_text(f"{name} ({rec.id}, {rec.channel}, model {rec.model})")
        if rec.abbreviation:
            print_text(f"Abbreviation: {rec.abbreviation}")
        owners = OwnerIdentities(config)

        def speaker(line: dict[str, Any]) -> str:
            """Who said a turn, in the dashboard's words: "You" and "Assistant". The
            transcript keeps the owner's identity as the channel gave it ("1001" on
            Telegram, "me@example.org" by e-mail, "user" on the web); the assistant's
            turns read "assistant:" next to "Owner:"."""
            sender = line.get("sender")
            channel = str(line.get("channel") or rec.channel)
            if line.get("role") == "assistant":
                return "Assistant"
            if line.get("role") == "user" and (
                not sender or owners.match(channel, str(sender)) is not None
            ):
                return "You"
            return str(sender or line.get("role"))

        for line in lines:
            if line.get("type") == "turn":
                who = speaker(line)
                number = line.get("turnNumber")
                print_text(
                    f"{'' if number is None else f'[{number}] '}"
                    f"{when(line.get('timestamp'))} {who}: {line.get('content')}"
                )
            elif line.get("type") == "event" and line.get("event") not in SILENT_EVENTS:
                said = event_text(line)
                print_text(f"    ({line.get('event')}{': ' + said if said else ''})")
        return 0

    return int(asyncio.run(_with_services(config, _show if args.action == "show" else _list)))


# Events that carry nothing for the owner: an e-mail's Message-ID, kept to thread replies
# (printed as a bare "(message_ref)" line per mail; ``--json`` still has them).
SILENT_EVENTS = frozenset({"message_ref"})


def event_text(line: dict[str, Any]) -> str:
    """What a transcript event says, for ``conversations show``: a command with its
    arguments, a change of title, model or pinning, a note's text. Only the title, text
    or summary was read, so commands and model changes showed as "(command: )"."""
    if line.get("event") == "command":
        return f"{line.get('command') or ''} {line.get('args') or ''}".strip()
    if line.get("event") == "notes_behind" and isinstance(line.get("throughTurn"), int):
        return f"a late reply: the notes are to be written again after turn {line['throughTurn']}"
    # (bot.index_writes.TURNS_LOST: not imported, the parser must not load the store)
    if line.get("event") == "turns_lost" and isinstance(line.get("throughTurn"), int):
        through = line["throughTurn"]
        return f"turns numbered up to {through} lost (saved in removed/): the next is {through + 1}"
    changes = []
    if isinstance(line.get("title"), str) and line["title"]:
        changes.append(f"title {line['title']!r}")
    if isinstance(line.get("model"), str) and line["model"]:
        changes.append(f"model {line['model']}")
    if isinstance(line.get("pinned"), bool):
        changes.append("pinned" if line["pinned"] else "unpinned")
    for key in ("text", "summary", "message", "name"):
        if isinstance(line.get(key), str) and line[key]:
            changes.append(line[key])
            break
    return "; ".join(changes)
