"""The ``ngramd`` console script: argument parsing, and Ctrl-C without a traceback.

Each subcommand lives in its own module and is imported lazily, so that
``ngramd lsp`` starts without importing torch.
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
import sys

from ngramd.daemon import package_version

DESCRIPTION = ("ngramd: local code completion. A code model verifies drafts from an n-gram index "
               "of your workspace and buffers; the output is exactly the model's own.")
EXIT_INTERRUPTED = 130  # the shell's convention for SIGINT
EXIT_BROKEN_PIPE = 141  # and for SIGPIPE: the output's reader went away

# subcommand -> "module:function"; the function takes the parsed argparse.Namespace
# and returns a process exit code.
COMMANDS = {
    "serve": "ngramd.daemon.cli.serve_cmd:run_serve",
    "status": "ngramd.daemon.cli.serve_cmd:run_status",
    "stop": "ngramd.daemon.cli.serve_cmd:run_stop",
    "lsp": "ngramd.lsp.main:run",
    "complete": "ngramd.daemon.cli.complete_cmd:run",
    "edit": "ngramd.daemon.cli.edit_cmd:run",
    "bench": "ngramd.daemon.cli.bench_cmd:run",
}


def _add_model_args(p: argparse.ArgumentParser, runtime: bool = True) -> None:
    p.add_argument("--model", default=None,
                   help="Hugging Face model id (local cache), model directory, GGUF file, "
                        "or 'tiny' / 'tiny-fim' (random weights, for tests). Default: the embedded SmolLM2-135M.")
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto",
                   help="where the model runs (auto: cuda when torch sees a GPU)")
    if runtime:
        p.add_argument("--runtime", choices=["auto", "torch", "llamacpp"], default="auto",
                       help="what runs the model (auto: llama.cpp for a GGUF file on the CPU, at its own "
                            "quantization; torch for the rest)")
    p.add_argument("--exact-kernels", action="store_true",
                   help="llama.cpp: leave out ggml's many-row kernels whose sums differ from one row's "
                        "(K-quant models such as Q4_K_M need it for speculation; plain decoding is slower)")


def _add_position_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--no-speculation", action="store_true", help="plain decoding (baseline)")
    p.add_argument("--temperature", type=float, default=0.0, help="0 (default): greedy decoding")
    p.add_argument("--top-p", type=float, default=1.0, help="nucleus sampling, in (0, 1]")
    p.add_argument("--seed", type=int, default=None, help="sampling seed (reproducible output)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ngramd", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"%(prog)s {package_version()}")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("serve", help="run the daemon (one per user)")
    p.add_argument("--workspace", action="append", default=[], metavar="DIR",
                   help="index and watch the files under DIR (repeatable; editors add their folders too)")
    _add_model_args(p)
    p.add_argument("--socket", type=_socket_path, default=None, help=SOCKET_HELP)
    p.add_argument("--max-indexed-tokens", type=int, default=None,
                   help="bound on indexed tokens; least recently used files go first (default 8,000,000)")
    p.add_argument("--max-message-bytes", type=int, default=None,
                   help="largest RPC message accepted (default 64 MiB, at least 4096)")

    for name, help_text in (("status", "print the running daemon's figures"), ("stop", "stop the daemon")):
        p = sub.add_parser(name, help=help_text)
        p.add_argument("--socket", type=_socket_path, default=None, help=SOCKET_HELP)
        p.add_argument("--json", action="store_true", help="print one JSON object")

    p = sub.add_parser("lsp", help="Language Server over stdio; starts a daemon if none answers")
    p.add_argument("--socket", type=_lsp_socket_path, default=None, help=SOCKET_HELP)
    _add_model_args(p, runtime=False)  # the daemon it starts picks its runtime itself
    _add_lsp_client_args(p)

    p = sub.add_parser("complete", help="complete FILE at a position (in-process)")
    p.add_argument("file")
    p.add_argument("--line", type=int, required=True, help="0-based line")
    p.add_argument("--col", type=int, required=True, help="0-based column, in characters")
    p.add_argument("--max-tokens", type=int, default=64, help="at most this many tokens (default 64)")
    p.add_argument("--single-line", action="store_true", help="stop at the end of the line")
    p.add_argument("--workspace", action="append", default=[], metavar="DIR",
                   help="also draft from the files under DIR")
    _add_model_args(p)
    _add_position_args(p)

    p = sub.add_parser("edit", help="rewrite a range of FILE following an instruction (in-process)",
                       epilog="exit status: 0 done; 2 bad input; 3 the rewrite stopped before its end "
                              "(at its token limit, or caught in a loop): the text is printed cut short, "
                              "with a warning on stderr (with --json: 0, and stop_reason says it)")
    p.add_argument("file")
    p.add_argument("--start", required=True, metavar="L:C", help="0-based line:column")
    p.add_argument("--end", required=True, metavar="L:C", help="0-based line:column, after --start")
    p.add_argument("--instruction", required=True, help='what to change, e.g. "rename x to count"')
    p.add_argument("--max-tokens", type=int, default=None,
                   help="at most this many tokens (default: enough for the range and then some)")
    p.add_argument("--no-loop-stop", action="store_true",
                   help="let an answer that repeats itself run to --max-tokens (by default it stops "
                        "once it repeats ~100 tokens the prompt, the selection and the file around it, "
                        "does not hold)")
    _add_model_args(p)
    _add_position_args(p)

    p = sub.add_parser("bench", help="speculation vs plain decoding vs transformers' prompt lookup")
    p.add_argument("--cases", default=None, help="JSONL bench cases")
    p.add_argument("--make-cases", default=None, metavar="WORKSPACE",
                   help="write cases from a real workspace to stdout (or --out)")
    p.add_argument("--out", default=None, metavar="FILE.jsonl", help="--make-cases: write the cases here")
    # None where a default applies: given with the other of --cases / --make-cases, they are refused
    p.add_argument("--n", type=int, default=None, help="--make-cases: how many cases (default 20)")
    p.add_argument("--seed", type=int, default=None, help="--make-cases: random seed (default 0)")
    p.add_argument("--mode", choices=("complete", "edit"), default=None,
                   help="--make-cases: completion cases (cursors in function bodies, the default) or edit "
                        "cases (a small instruction on a whole function)")
    p.add_argument("--repeat", type=int, default=None,
                   help="time each decoder this many times per case, interleaved; the median counts (default 1)")
    p.add_argument("--prepared-repeat", type=int, default=None, metavar="N",
                   help="with --prepared: time the prepared variants N times per case (default: --repeat): their timed "
                        "part is a few passes, which move more from round to round than a cold run's prefill")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    p.add_argument("--plot", default=None, metavar="FILE.png",
                   help="draw speedups and accepted tokens per pass (needs matplotlib: pip install 'ngramd[plot]')")
    p.add_argument("--no-hf", action="store_true", help="skip the transformers prompt-lookup baseline")
    p.add_argument("--prepared", action="store_true",
                   help="also time each case with its prompt prefilled first, speculative and plain, "
                        "as the editors prepare where the cursor rests or while an edit's instruction is typed")
    p.add_argument("--typed-instruction", action="store_true",
                   help="with --prepared: prepare each edit through its instruction, as the editors do once "
                        "the typing pauses (default: up to the instruction, as when the prompt opens)")
    p.add_argument("--rows", default=None, metavar="FILE.jsonl",
                   help="also append each case's row to FILE as soon as it is measured "
                        "(an interrupted run keeps what it measured)")
    _add_model_args(p)
    p.set_defaults(device=None)  # "auto" once --cases is known: --make-cases loads no model
    return parser


SOCKET_HELP = ("unix socket path (default: $XDG_RUNTIME_DIR/ngramd/ngramd.sock, "
               "or ngramd.sock in the user cache dir without XDG_RUNTIME_DIR)")


def _socket_path(value: str) -> str:
    """--socket's value; an empty one is a usage error: it would mean the default socket, so a
    script whose variable came out empty would reach (or stop) the default daemon unawares."""
    if not value:
        raise argparse.ArgumentTypeError("must be a path, not empty (leave --socket out for the default)")
    return value


STDIO_ONLY = "ngramd lsp speaks LSP over stdio only"


def _lsp_socket_path(value: str) -> str:
    """``ngramd lsp --socket``: the daemon's unix socket. vscode-languageclient's socket transport
    appends ``--socket=PORT``; a bare port number gets told so rather than taken for a file name."""
    if value.isdigit():
        raise argparse.ArgumentTypeError(
            f"{value!r} looks like a TCP port (an LSP client's socket transport); {STDIO_ONLY}, "
            "and --socket names the daemon's unix socket path")
    return _socket_path(value)


class _RefusedTransport(argparse.Action):
    """An LSP client's transport flag other than stdio: a clear usage error, naming the fix."""

    def __call__(self, parser, namespace, values, option_string=None):
        parser.error(f"{option_string}: {STDIO_ONLY}; configure the client for stdio "
                     "(VS Code: leave the server's `transport` out, or TransportKind.stdio)")


def _add_lsp_client_args(p: argparse.ArgumentParser) -> None:
    """The flags LSP clients append on their own (vscode-languageclient, many others)."""
    p.add_argument("--stdio", action="store_true",
                   help="accepted for the LSP clients that pass it: stdio is the transport")
    p.add_argument("--clientProcessId", type=int, default=None, metavar="PID",
                   help="accepted for the LSP clients that pass it (the process id in `initialize` is what counts)")
    for flag in ("--pipe", "--node-ipc", "--port"):
        p.add_argument(flag, nargs="?", action=_RefusedTransport, help=argparse.SUPPRESS)


_POSITION_OPTIONS = ("--start", "--end")
_POSITION_VALUE = re.compile(r"-?\d+:-?\d+")


def _attach_position_values(argv: list[str]) -> list[str]:
    """``--start -1:0`` -> ``--start=-1:0``: argparse would take ``-1:0`` for an option and
    report a missing value; attached, the value reaches the check that explains it."""
    out: list[str] = []
    i = 0
    while i < len(argv):
        if argv[i] in _POSITION_OPTIONS and i + 1 < len(argv) and _POSITION_VALUE.fullmatch(argv[i + 1]):
            out.append(f"{argv[i]}={argv[i + 1]}")
            i += 2
        else:
            out.append(argv[i])
            i += 1
    return out


# commands that may load a model in this process: run in 2 MB pages (daemon/runtime/huge_pages.py)
LOADS_A_MODEL = ("serve", "complete", "edit", "bench")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(_attach_position_values(sys.argv[1:] if argv is None else argv))
    if argv is None and args.command in LOADS_A_MODEL:  # a command line, not a caller in this process
        from ngramd.daemon.runtime.huge_pages import reexec_with_huge_pages

        reexec_with_huge_pages()
    module_name, func_name = COMMANDS[args.command].split(":")
    try:
        func = getattr(importlib.import_module(module_name), func_name)
        return int(func(args) or 0)
    except KeyboardInterrupt:  # Ctrl-C, e.g. during a model load: no traceback
        print(f"ngramd {args.command}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # the output's reader went away (`ngramd status | head -3`): as a shell command
        # stdout goes nowhere from now on, else Python reports the pipe again when it flushes at exit
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE


if __name__ == "__main__":
    sys.exit(main())
