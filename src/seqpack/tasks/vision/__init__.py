"""Image-text SFT packed exactly: samples made by the model's processor, one plan over their lengths
(image tokens included), rows whose samples keep the positions they have alone. The rows are a
packed dataset like any other, the images in its example table.

    cfg = PackConfig.for_task("vision", max_len=4096)
    build_packed_dataset("train.jsonl", ProcessorTokenizer(processor), "vlm-packs/", cfg)  # TRL's vision records
    loader = DataLoader(VisionRows("vlm-packs/"), batch_size=4, collate_fn=VisionCollator(processor))
"""

from seqpack.tasks.vision.collate import VisionBatches, VisionCollator
from seqpack.tasks.vision.packed import (
    VisionPacks,
    VisionRows,
    pack_vision,
    vision_sequences,
)
from seqpack.tasks.vision.processor import ProcessorTokenizer, load_processor
from seqpack.tasks.vision.rope import POSITION_SCHEMES, mrope_positions, position_scheme_of
from seqpack.tasks.vision.samples import VisionSamples, vision_samples

__all__ = [
    "POSITION_SCHEMES",
    "ProcessorTokenizer",
    "VisionBatches",
    "VisionCollator",
    "VisionPacks",
    "VisionRows",
    "VisionSamples",
    "load_processor",
    "mrope_positions",
    "pack_vision",
    "position_scheme_of",
    "vision_samples",
    "vision_sequences",
]
