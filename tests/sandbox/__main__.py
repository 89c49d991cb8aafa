"""CLI for the sandbox fleet: ``python -m tests.sandbox up --hosts N | down | status | check``."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tests.sandbox.emulator_payload import build_emulator
from tests.sandbox.fleet import Fleet, SandboxError, unsupported_reason


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.sandbox", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="boot N sandbox hosts and write an inventory")
    up.add_argument("--hosts", type=int, default=1, help="number of hosts (default 1)")
    up.add_argument("--emulator", action="store_true",
                    help="install the SGLang emulator (built once into .cache/emulator) on every host")
    up.add_argument("--profile", action="append", default=[], metavar="HOST=PATH",
                    help="emulator profile for one host (repeatable); default: the demo profile")
    sub.add_parser("down", help="power off every host and remove all traces")
    sub.add_parser("status", help="list running hosts")
    sub.add_parser("check", help="whether sandbox hosts can run here (exit 1 with the reason when not)")
    args = parser.parse_args(argv)
    if args.command == "check":
        reason = unsupported_reason()
        print(reason or "sandbox hosts can run here", file=sys.stderr if reason else sys.stdout)
        return 1 if reason else 0

    fleet = Fleet()
    try:
        if args.command == "up":
            if args.hosts < 1:
                parser.error("--hosts must be at least 1")
            emulator = build_emulator() if args.emulator else None
            profiles = dict(_host_profile(item, parser) for item in args.profile)
            for host in fleet.up(args.hosts, emulator=emulator, profiles=profiles):
                print(f"{host.name}\t{host.address}\tpid {host.pid}")
            print(f"inventory: {fleet.inventory_file}")
        elif args.command == "down":
            fleet.down()
            left = fleet.leftovers()
            if left:
                print("left behind:\n  " + "\n  ".join(left), file=sys.stderr)
                return 1
            print("sandbox fleet is down; nothing left behind")
        else:
            hosts = fleet.hosts()
            for host in hosts:
                print(f"{host.name}\t{host.address}\tpid {host.pid}")
            if not hosts:
                print("no sandbox hosts are up")
    except SandboxError as exc:
        print(f"sandbox: {exc}", file=sys.stderr)
        return 1
    return 0


def _host_profile(item: str, parser: argparse.ArgumentParser) -> tuple[str, Path]:
    host, sep, path = item.partition("=")
    if not sep or not Path(path).is_file():
        parser.error(f"--profile expects HOST=PATH to an existing file, got {item!r}")
    return host, Path(path).resolve()


if __name__ == "__main__":
    sys.exit(main())
