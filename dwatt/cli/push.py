"""`dwatt push`: a finished run (head-only by default) with its model card, or a probe ensemble's folder as one repo,
to the Hub."""

from __future__ import annotations

import argparse


def register(commands) -> None:
    parser = commands.add_parser(
        "push", help="push a finished run (head-only by default) with a model card to the Hub"
    )
    parser.add_argument(
        "run_dir",
        help="a finished run's folder (results.json and model/), or a probe ensemble's "
        "(dwatt probe --save-ensemble K: OUTPUT/ensemble-K)",
    )
    parser.add_argument("repo_id")
    parser.add_argument("--full", action="store_true", help="push the backbone too")
    parser.add_argument("--commit-message", default=None)
    parser.add_argument("--private", action="store_true", default=None)
    parser.add_argument("--revision", default=None, help="branch to push to")
    parser.add_argument("--create-pr", action="store_true")
    parser.add_argument(
        "--backbone-id",
        default=None,
        help="the backbone's Hub id (e.g. sentence-transformers/all-MiniLM-L6-v2) to record instead of a local folder",
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from ..hub import push_run

    url = push_run(
        args.run_dir,
        args.repo_id,
        heads_only=not args.full,
        commit_message=args.commit_message,
        private=args.private,
        revision=args.revision,
        create_pr=args.create_pr,
        backbone_id=args.backbone_id,
    )
    print(f"pushed {args.run_dir} to {args.repo_id}: {url}")
    return 0
