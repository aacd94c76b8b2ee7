"""Everything that knows model families: the embedded tiny checkpoint, loading the right
class and processor, prompts, generation, per-family training inputs, LoRA targets."""
