"""The bundled smoke dataset: 14 records in the seed's format (as its ``test_data_packing.json``:
short, repetitive answers, whose loss falls quickly and says nothing about the model), images
drawn offline with PIL."""

from __future__ import annotations

import json
import os
from pathlib import Path

from hyport_lib.utils.files import atomic_write_text

SMOKE_FILE = "smoke_data_packing.json"
IMAGE_FOLDER = "images"
_SIZE = 32
_SHAPES = {
    "red_circle": ("ellipse", (220, 40, 40)),
    "blue_square": ("rectangle", (40, 80, 220)),
    "green_triangle": ("triangle", (40, 170, 60)),
    "yellow_circle": ("ellipse", (230, 200, 40)),
    "grey_square": ("rectangle", (128, 128, 128)),
    "purple_triangle": ("triangle", (150, 60, 170)),
}


def _describe(name: str) -> str:
    colour, shape = name.split("_")
    return f"a {colour} {shape}"


def _records() -> list[dict]:
    def turn(who: str, text: str) -> dict:
        return {"from": who, "value": text}

    records = []
    for i, name in enumerate(["red_circle", "blue_square", "green_triangle", "yellow_circle",
                              "grey_square", "purple_triangle"]):
        records.append({"id": f"smoke-single-{i}", "image": f"{IMAGE_FOLDER}/{name}.png",
                        "conversations": [turn("human", "<image>\nDescribe the image."),
                                          turn("gpt", f"The picture shows {_describe(name)}.")]})
    pairs = [("red_circle", "blue_square"), ("green_triangle", "yellow_circle"),
             ("grey_square", "purple_triangle")]
    for i, (a, b) in enumerate(pairs):
        records.append({
            "id": f"smoke-pair-{i}", "image": [f"{IMAGE_FOLDER}/{a}.png", f"{IMAGE_FOLDER}/{b}.png"],
            "conversations": [turn("human", "<image>\n<image>\nWhat do the two pictures show?"),
                              turn("gpt", f"The first shows {_describe(a)}, the second "
                                          f"{_describe(b)}.")]})
    for i, name in enumerate(["blue_square", "red_circle"]):
        records.append({
            "id": f"smoke-multiturn-{i}", "image": f"{IMAGE_FOLDER}/{name}.png",
            "conversations": [turn("human", "<image>\nWhat shape is this?"),
                              turn("gpt", f"It is {_describe(name)}."),
                              turn("human", "What colour is it?"),
                              turn("gpt", f"It is {name.split('_')[0]}.")]})
    texts = [("How do I open a fridge?", "Hold the handle and pull the door gently."),
             ("What does the robot do next?", "It picks up the cup and puts it on the table."),
             ("Name three shapes.", "A circle, a square and a triangle.")]
    for i, (question, answer) in enumerate(texts):
        records.append({"id": f"smoke-text-{i}",
                        "conversations": [turn("human", question), turn("gpt", answer)]})
    return records


def _draw(name: str, path: Path) -> None:
    from PIL import Image, ImageDraw

    kind, colour = _SHAPES[name]
    img = Image.new("RGB", (_SIZE, _SIZE), (245, 245, 240))
    draw = ImageDraw.Draw(img)
    box = (5, 5, _SIZE - 6, _SIZE - 6)
    if kind == "triangle":
        draw.polygon([(_SIZE // 2, 4), (_SIZE - 5, _SIZE - 5), (4, _SIZE - 5)], fill=colour)
    else:
        getattr(draw, kind)(box, fill=colour)
    import tempfile

    # A private temporary name: several launches (threads or processes) may draw at once.
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    with os.fdopen(fd, "wb") as fh:
        img.save(fh, format="PNG")
    os.replace(tmp, path)


def write_smoke_dataset(folder: os.PathLike) -> Path:
    """Write the dataset file and its images into ``folder`` (atomically: several processes may); its path."""
    folder = Path(folder)
    (folder / IMAGE_FOLDER).mkdir(parents=True, exist_ok=True)
    for name in _SHAPES:
        target = folder / IMAGE_FOLDER / f"{name}.png"
        if not target.is_file():
            _draw(name, target)
    records = _records()
    return atomic_write_text(folder / SMOKE_FILE, json.dumps(records, indent=1, ensure_ascii=False) + "\n")

