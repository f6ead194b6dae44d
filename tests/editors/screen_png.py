"""A terminal screen (`tmux capture-pane -p -e`: text with SGR escapes) drawn as HTML, and
that HTML rendered to PNG by headless Chromium: the pictures of the Neovim tests."""

from __future__ import annotations

import html
import re
import subprocess
from pathlib import Path

# xterm's 16 colours, then the 6x6x6 cube and the grey ramp of the 256-colour palette
_BASE16 = ["#000000", "#cd0000", "#00cd00", "#cdcd00", "#0000ee", "#cd00cd", "#00cdcd", "#e5e5e5",
           "#7f7f7f", "#ff0000", "#00ff00", "#ffff00", "#5c5cff", "#ff00ff", "#00ffff", "#ffffff"]
_LEVELS = [0, 95, 135, 175, 215, 255]
FG, BG = "#d0d0d0", "#1c1c1c"


def palette(n: int) -> str:
    if n < 16:
        return _BASE16[n]
    if n < 232:
        n -= 16
        return "#%02x%02x%02x" % (_LEVELS[n // 36], _LEVELS[n // 6 % 6], _LEVELS[n % 6])
    g = 8 + (n - 232) * 10
    return "#%02x%02x%02x" % (g, g, g)


_SGR = re.compile(r"\x1b\[([0-9;:]*)m")


def _apply(codes: list[int], st: dict) -> None:
    i = 0
    while i < len(codes):
        c = codes[i]
        if c == 0:
            st.clear()
        elif c == 1:
            st["bold"] = True
        elif c == 3:
            st["italic"] = True
        elif c == 4:
            st["underline"] = True
        elif c == 7:
            st["reverse"] = True
        elif c in (22,):
            st.pop("bold", None)
        elif c == 23:
            st.pop("italic", None)
        elif c == 24:
            st.pop("underline", None)
        elif c == 27:
            st.pop("reverse", None)
        elif 30 <= c <= 37 or 90 <= c <= 97:
            st["fg"] = palette(c - 30 if c < 90 else c - 90 + 8)
        elif 40 <= c <= 47 or 100 <= c <= 107:
            st["bg"] = palette(c - 40 if c < 100 else c - 100 + 8)
        elif c == 39:
            st.pop("fg", None)
        elif c == 49:
            st.pop("bg", None)
        elif c in (38, 48) and i + 1 < len(codes):
            key = "fg" if c == 38 else "bg"
            if codes[i + 1] == 5 and i + 2 < len(codes):
                st[key] = palette(codes[i + 2])
                i += 2
            elif codes[i + 1] == 2 and i + 4 < len(codes):
                st[key] = "#%02x%02x%02x" % tuple(codes[i + 2:i + 5])
                i += 4
        i += 1


def screen_html(screen: str, title: str = "") -> str:
    """HTML of a captured screen: one <span> per run of text in the same style."""
    out, st = [], {}
    pos = 0
    for m in _SGR.finditer(screen):
        out.append(_span(screen[pos:m.start()], st))
        codes = [int(x) for x in re.split("[;:]", m.group(1)) if x != ""] or [0]
        _apply(codes, st)
        pos = m.end()
    out.append(_span(screen[pos:], st))
    body = "".join(out)
    return (f"<!doctype html><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>body{{margin:0;background:{BG}}}pre{{margin:0;padding:10px;color:{FG};background:{BG};"
            "font:16px/1.25 'DejaVu Sans Mono',monospace;display:inline-block}}</style>"
            f"<pre>{body}</pre>")


def _span(text: str, st: dict) -> str:
    if not text:
        return ""
    fg, bg = st.get("fg", FG), st.get("bg", BG)
    if st.get("reverse"):
        fg, bg = bg, fg
    style = f"color:{fg};background:{bg}"
    if st.get("bold"):
        style += ";font-weight:bold"
    if st.get("italic"):
        style += ";font-style:italic"
    if st.get("underline"):
        style += ";text-decoration:underline"
    return f"<span style=\"{style}\">{html.escape(text)}</span>"


def render_png(screen: str, png: Path, chromium: str, columns: int, rows: int, title: str = "") -> Path:
    """Write ``png``, the screen as Chromium draws its HTML (sized for columns x rows)."""
    page = png.with_suffix(".html")
    page.write_text(screen_html(screen, title))
    width, height = columns * 10 + 20, int(rows * 20 + 20)
    subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                    f"--user-data-dir={png.parent / '.chromium'}", f"--window-size={width},{height}",
                    f"--screenshot={png}", page.as_uri()],
                   check=True, capture_output=True, timeout=120)
    return png
