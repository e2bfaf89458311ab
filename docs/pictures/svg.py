"""A few SVG primitives, enough for the docs' two pictures (no plotting library: the pictures are
text files a diff can read, and rebuilding them needs nothing beyond warpwatch itself)."""

from __future__ import annotations

from html import escape

FONT = "font-family='Helvetica, Arial, sans-serif'"


def num(x: float) -> str:
    """A coordinate with at most one decimal, the same on every machine."""
    text = f"{x:.1f}"
    return text[:-2] if text.endswith(".0") else text


class Svg:
    def __init__(self, width: int, height: int) -> None:
        self.width, self.height = width, height
        self.parts: list[str] = []

    def rect(self, x: float, y: float, w: float, h: float, fill: str, extra: str = "") -> None:
        self.parts.append(
            f"<rect x='{num(x)}' y='{num(y)}' width='{num(max(w, 0.6))}' height='{num(h)}' fill='{fill}' {extra}/>"
        )

    def line(self, x1: float, y1: float, x2: float, y2: float, stroke: str = "#333", extra: str = "") -> None:
        self.parts.append(
            f"<line x1='{num(x1)}' y1='{num(y1)}' x2='{num(x2)}' y2='{num(y2)}' stroke='{stroke}' {extra}/>"
        )

    def circle(self, x: float, y: float, r: float, fill: str, extra: str = "") -> None:
        self.parts.append(f"<circle cx='{num(x)}' cy='{num(y)}' r='{num(r)}' fill='{fill}' {extra}/>")

    def text(self, x: float, y: float, s: str, size: int = 12, anchor: str = "start", extra: str = "") -> None:
        self.parts.append(
            f"<text x='{num(x)}' y='{num(y)}' font-size='{size}' text-anchor='{anchor}' {FONT} {extra}>"
            f"{escape(s)}</text>"
        )

    def render(self, title: str) -> str:
        head = (
            f"<svg xmlns='http://www.w3.org/2000/svg' width='{self.width}' height='{self.height}' "
            f"viewBox='0 0 {self.width} {self.height}' role='img'>\n<title>{escape(title)}</title>\n"
            f"<rect width='{self.width}' height='{self.height}' fill='white'/>\n"
        )
        return head + "\n".join(self.parts) + "\n</svg>\n"
