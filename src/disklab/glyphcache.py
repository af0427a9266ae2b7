"""Text drawn from remembered glyphs: the pixels of matplotlib's Agg renderer, in a third less time per plot.

Drawing text is most of a report plot's cost. Matplotlib 3.11's Agg renderer lays each string out with
FreeType and then renders every glyph again, at its exact sub-pixel position, for every text of every
plot, although a fleet's plots draw the same labels, legends and digits host after host. :class:`Canvas`
is an Agg canvas whose renderer keeps both:

* a string's layout (its glyphs and their offsets), per font object, size, resolution and string;
* a glyph's bitmap, per font object, size, resolution, glyph, rotation and position within its pixel
  (FreeType's 1/64 px): moving a glyph by whole pixels moves its bitmap and nothing else, so the
  bitmap rendered at one position is the one FreeType renders at any other with the same fraction.

Each is filled by the same FreeType calls matplotlib makes (``_layout``, ``_set_transform``,
``_render_glyph``) and blended by the same ``draw_text_image``: the same pixels, which the tests check
against matplotlib's own renderer. Those calls are matplotlib's private ones, so the cache is used only
where they are all there (:data:`SUPPORTED`); elsewhere a plot is drawn by matplotlib's renderer alone.
"""

from __future__ import annotations

import math

from matplotlib.backends.backend_agg import FigureCanvasAgg, RendererAgg, get_hinting_flag
from matplotlib.ft2font import FT2Font
from matplotlib.text import Text

try:
    from matplotlib.ft2font import RenderMode
except ImportError:  # before matplotlib 3.11: text is drawn a string at a time, nothing to remember
    RenderMode = None

SUPPORTED = (
    RenderMode is not None
    and all(hasattr(FT2Font, name) for name in ("_layout", "_set_transform", "_render_glyph"))
    and all(hasattr(Text, name) for name in ("get_fontfeatures", "get_language"))
)
# Entries kept per process before a cache starts again (a glyph's bitmap is a few hundred bytes).
MAX_LAYOUTS = 20_000
MAX_GLYPHS = 50_000
_layouts: dict[tuple, list[tuple]] = {}
_glyphs: dict[tuple, tuple[object, int, int]] = {}


class Renderer(RendererAgg):
    """matplotlib's Agg renderer, drawing plain text (not mathtext) from the caches."""

    # the same arguments as RendererAgg.draw_text, whose glyph loop (_draw_text_glyphs_and_boxes) this follows

    def draw_text(self, gc, x, y, s, prop, angle, ismath=False, mtext=None):
        features = mtext.get_fontfeatures() if mtext is not None else None
        language = mtext.get_language() if mtext is not None else None
        if ismath or not isinstance(language, (str, type(None))):  # language ranges: a list, not a key
            return super().draw_text(gc, x, y, s, prop, angle, ismath, mtext)
        font = self._prepare_font(prop)
        flags = get_hinting_flag()
        size = prop.get_size_in_points()
        items = _layout(font, size, self.dpi, s, flags, features, language)
        cos, sin = math.cos(math.radians(angle)), math.sin(math.radians(angle))
        # FreeType's 16.16 rotation, rounded half to even as matplotlib rounds it
        matrix = [[round(0x10000 * cos), round(0x10000 * -sin)], [round(0x10000 * sin), round(0x10000 * cos)]]
        rotation = tuple(matrix[0] + matrix[1])
        antialiased = gc.get_antialiased()
        for ft, glyph, dx, dy in items:  # dy is upwards, as FreeType's y
            px = round(0x40 * (x + dx * cos - dy * sin))
            py = round(0x40 * (self.height - y + dx * sin + dy * cos))
            key = (ft, size, self.dpi, glyph, rotation, px & 63, py & 63, flags, antialiased)
            found = _glyphs.get(key)
            if found is None:
                found = _render(ft, size, self.dpi, glyph, matrix, px & 63, py & 63, flags, antialiased)
                if len(_glyphs) >= MAX_GLYPHS:
                    _glyphs.clear()
                _glyphs[key] = found
            bitmap, left, top = found
            left, top = left + (px >> 6), top + (py >> 6)
            # draw_text_image's y is downwards, at the bitmap's bottom side
            self._renderer.draw_text_image(bitmap, left, int(self.height) - top + bitmap.shape[0], 0, gc)


def _layout(font, size, dpi, s, flags, features, language) -> list[tuple]:
    """``[(font object, glyph index, x, y)]`` of ``s``, as FT2Font._layout gives them, remembered."""
    key = (font, size, dpi, s, flags, tuple(features) if features else None, language)
    items = _layouts.get(key)
    if items is None:
        laid = font._layout(s, flags=flags, features=features, language=language)
        items = [(item.ft_object, item.glyph_index, item.x, item.y) for item in laid]
        if len(_layouts) >= MAX_LAYOUTS:
            _layouts.clear()
        _layouts[key] = items
    return items


def _render(ft, size, dpi, glyph, matrix, frac_x, frac_y, flags, antialiased) -> tuple[object, int, int]:
    """The glyph's bitmap (a copy of FreeType's buffer) placed at (frac_x, frac_y)/64 px, with its left and
    top in whole pixels."""
    ft.set_size(size, dpi)
    ft._set_transform(matrix, [frac_x, frac_y])
    bitmap = ft._render_glyph(glyph, flags, RenderMode.NORMAL if antialiased else RenderMode.MONO)
    buffer = bitmap.buffer.copy()
    if not antialiased:
        buffer *= 0xFF
    return buffer, bitmap.left, bitmap.top


class Canvas(FigureCanvasAgg):
    """An Agg canvas drawing with :class:`Renderer` where :data:`SUPPORTED`."""

    def get_renderer(self):
        if not SUPPORTED:
            return super().get_renderer()
        w, h = self.get_width_height(physical=True)
        key = w, h, self.figure.dpi
        if self._lastKey != key:
            self.renderer = Renderer(w, h, self.figure.dpi)
            self._lastKey = key
        return self.renderer
