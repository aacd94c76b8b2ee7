"""The embedded model's tokenizer: a small byte-level BPE trained offline. Byte level, so
any prompt (Chinese included) encodes; trained on sentences like the workbook's prompts,
so the merges form English words and random weights still "say" word-like text.
"""

from __future__ import annotations

#: Special tokens, in id order. ``<|im_end|>`` ends a turn (eos); ``<image>`` is the
#: placeholder the processor expands to one token per image patch.
SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<image>", "<pad>")
#: Ordinary added tokens (kept when decoding), as in Qwen3-style thinking templates.
THINK_TOKENS = ("<think>", "</think>")
IMAGE_TOKEN = "<image>"
BOS_TOKEN = "<|im_start|>"
EOS_TOKEN = "<|im_end|>"
PAD_TOKEN = "<pad>"
VOCAB_SIZE = 1024

# Why a chat template and not plain prompts: the reference script calls
# apply_chat_template(..., enable_thinking=...), and real checkpoints differ exactly here.
# With thinking off an empty think block is pre-filled, as Qwen3 and HY-Embodied do.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' }}"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for item in message['content'] %}"
    "{% if item['type'] == 'image' %}{{ '<image>' }}"
    "{% elif item['type'] == 'text' %}{{ item['text'] }}{% endif %}"
    "{% endfor %}{% endif %}"
    "{{ '<|im_end|>\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}"
    "{% if enable_thinking is defined and not enable_thinking %}"
    "{{ '<think>\n\n</think>\n\n' }}"
    "{% endif %}{% endif %}"
)

_CORPUS = """\
Describe the image. The picture shows a red circle, a blue square and a green triangle.
The image is a small drawing with simple shapes and bright colours on a light background.
In the centre of the picture there is a yellow sun above a grey road.
This is a close-up, slightly high-angle shot of a white office desk with a laptop.
On the left side there is a window; on the right side there is a tall plant.
The colours are warm and the light comes from the top of the frame.
How do I open a fridge? Here are the standard steps to open a fridge door.
First, stand in front of the fridge. Then hold the handle and pull the door gently.
If the door is stuck, pull a little harder, then close it so the food stays cold.
The kitchen has a fridge, a sink, a table, two chairs and a cup of tea.
A robot arm picks up the cup and puts it on the table next to the plate.
The robot looks at the scene, plans the next step and moves its hand to the handle.
The model reads the image and the text, then writes an answer one token at a time.
Each card runs the same model and should give the same answer for the same prompt.
The training loss goes down step by step, and the weights are saved and loaded again.
Porting a model from CUDA to the NPU means replacing flash attention with a fused kernel.
Attention uses queries, keys and values; the mask keeps the model from seeing the future.
Ascend cards use torch_npu, CANN and HCCL; GPUs use CUDA and NCCL.
The answer is short and clear. The question is about what the picture shows.
There are three objects: a circle, a square and a triangle. They do not overlap.
The red shape is round, the blue shape has four corners and the green one has three.
Open the door, look inside, take the milk and close the door again.
Thinking step by step helps when the question needs a plan before the answer.
Please describe what you see in this picture in one or two sentences.
请描述这张图片。如何打开冰箱？图中有一个红色的圆形和一个蓝色的正方形。
"""


def train_byte_bpe(lines, special_tokens, vocab_size: int):
    """A byte-level BPE (``tokenizers``) trained on ``lines``, its first ids being
    ``special_tokens`` in order."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(special_tokens),
        # The full byte alphabet: every input encodes, whatever its script.
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(list(lines), trainer)
    return tokenizer


def build_tokenizer(vocab_size: int = VOCAB_SIZE):
    """The byte-level BPE as a ``PreTrainedTokenizerFast`` (bos/eos/pad, left padding, the
    chat template)."""
    from transformers import PreTrainedTokenizerFast

    tokenizer = train_byte_bpe(_CORPUS.splitlines(), SPECIAL_TOKENS, vocab_size)
    tokenizer.add_tokens(list(THINK_TOKENS))

    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        bos_token=BOS_TOKEN,
        eos_token=EOS_TOKEN,
        pad_token=PAD_TOKEN,
        padding_side="left",
        model_max_length=1024,
        # Llama's inputs: without this, transformers 4.57 also returns token_type_ids,
        # which generate() then rejects as an unused model kwarg.
        model_input_names=["input_ids", "attention_mask"],
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def invisible_token_ids(tokenizer) -> list[int]:
    """Ids whose text is not visible on its own (special tokens, control bytes, partial
    UTF-8, whitespace): the embedded model suppresses them so random weights still decode
    to readable text and never stop at eos after one token."""
    special = set(tokenizer.all_special_ids)
    hidden = []
    for token_id in range(len(tokenizer)):
        if token_id in special:
            hidden.append(token_id)
            continue
        text = tokenizer.decode([token_id])
        visible = bool(text.strip()) and "\ufffd" not in text and all(
            ch.isprintable() or ch in " \n" for ch in text
        )
        if not visible:
            hidden.append(token_id)
    return hidden
