"""Image-text SFT packed exactly: samples made by the model's processor, one plan over their lengths
(image tokens included), rows whose samples keep the positions they have alone.

    samples = vision_samples("train.jsonl", processor, max_len=4096)   # TRL's vision records
    packs = pack_vision(samples, max_len=4096)
    write_vision_packs(packs, "vlm-packs/")
    loader = DataLoader(VisionRows("vlm-packs/"), batch_size=4, collate_fn=VisionCollator(processor))
"""

from seqpack.tasks.vision.collate import VisionCollator
from seqpack.tasks.vision.packed import VisionPacks, VisionRows, pack_vision, vision_rows_dataset, write_vision_packs
from seqpack.tasks.vision.processor import load_processor
from seqpack.tasks.vision.rope import LAYOUTS, layout_of, mrope_positions
from seqpack.tasks.vision.samples import VisionSamples, vision_samples

__all__ = [
    "LAYOUTS",
    "VisionCollator",
    "VisionPacks",
    "VisionRows",
    "VisionSamples",
    "layout_of",
    "load_processor",
    "mrope_positions",
    "pack_vision",
    "vision_rows_dataset",
    "vision_samples",
    "write_vision_packs",
]
