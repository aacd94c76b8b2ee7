"""A deterministic sample picture, drawn offline (nothing is downloaded)."""

from __future__ import annotations


def sample_image(size: tuple[int, int] = (64, 64)):
    """An RGB picture of a small scene, ``size`` ``(width, height)`` at least 16 pixels each.
    The same size always gives the same pixels, so the cards of a grid can compare outputs
    by hash."""
    from PIL import Image, ImageDraw

    width, height = (int(v) for v in size)
    if width < 16 or height < 16:
        raise ValueError(f"size={size!r}: width and height must be at least 16 pixels")
    image = Image.new("RGB", (width, height))
    draw = ImageDraw.Draw(image)
    horizon = height * 3 // 5
    for y in range(height):
        if y < horizon:  # sky: light blue fading to white
            t = y / max(horizon - 1, 1)
            colour = (int(135 + 120 * t), int(190 + 65 * t), 250)
        else:  # table top: warm grey
            t = (y - horizon) / max(height - horizon - 1, 1)
            colour = (int(170 - 50 * t), int(150 - 45 * t), int(130 - 40 * t))
        draw.line([(0, y), (width - 1, y)], fill=colour)

    def box(x0, y0, x1, y1):
        return [int(x0 * width), int(y0 * height), int(x1 * width), int(y1 * height)]

    draw.ellipse(box(0.72, 0.06, 0.92, 0.26), fill=(250, 210, 40))  # sun
    draw.ellipse(box(0.08, 0.45, 0.36, 0.73), fill=(215, 40, 40), outline=(90, 10, 10))
    draw.rectangle(box(0.40, 0.50, 0.64, 0.74), fill=(40, 80, 210), outline=(10, 20, 90))
    draw.polygon(
        [
            (int(0.68 * width), int(0.76 * height)),
            (int(0.96 * width), int(0.76 * height)),
            (int(0.82 * width), int(0.46 * height)),
        ],
        fill=(40, 170, 70),
        outline=(10, 70, 20),
    )
    return image
