"""Chat templates of the zoo's families, written in each family's real format.

Every multimodal template accepts string content and lists of content parts
(``{"type": "image"}``, ``{"type": "video"}``, ``{"type": "text", "text": ...}``) and
``add_generation_prompt``. Each renders a prefix of a conversation as a prefix of the
full rendering (a turn never depends on the turns after it), which the labels code
relies on. PaliGemma has none: its checkpoints use prefix prompts, not chat turns.

They are faithful re-writings, not byte copies, of the checkpoints' own templates
(Qwen2-VL-2B-Instruct, Qwen2.5-VL, Qwen3-VL, llava-onevision-qwen2-ov-hf,
InternVL3-hf, HunyuanOCR, SmolVLM / Idefics3, gemma-3-it, Qwen3, Llama-3.1-Instruct,
Hunyuan-*-Instruct dense and Hunyuan-A13B MoE, gemma-2-it, gpt-oss, DeepSeek-V3,
Llama-3.2-Vision-Instruct, pixtral-12b, LFM2, Llama-4-Instruct; Bamba and Gemma 3n
use the Llama-3.1 and gemma-3 ones, as their checkpoints do). Where a real template is
not prefix-stable (gpt-oss, Llama-3.2-Vision, pixtral) the comment above the constant
says what was changed and why.
"""

from __future__ import annotations

# --- Qwen-VL family ------------------------------------------------------------------

#: Qwen2-VL / Qwen2.5-VL: a default system prompt when the conversation has none;
#: each image is ``<|vision_start|><|image_pad|><|vision_end|>`` inline.
QWEN2_VL = (
    "{% set image_count = namespace(value=0) %}{% set video_count = namespace(value=0) %}"
    "{% for message in messages %}"
    "{% if loop.first and message['role'] != 'system' %}"
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
    "{% endif %}"
    "<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}<|im_end|>\n"
    "{% else %}{% for content in message['content'] %}"
    "{% if content['type'] == 'image' or 'image' in content or 'image_url' in content %}"
    "{% set image_count.value = image_count.value + 1 %}"
    "{% if add_vision_id %}Picture {{ image_count.value }}: {% endif %}"
    "<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif content['type'] == 'video' or 'video' in content %}"
    "{% set video_count.value = video_count.value + 1 %}"
    "{% if add_vision_id %}Video {{ video_count.value }}: {% endif %}"
    "<|vision_start|><|video_pad|><|vision_end|>"
    "{% elif 'text' in content %}{{ content['text'] }}{% endif %}"
    "{% endfor %}<|im_end|>\n{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

#: Qwen3-VL: the same turns without a default system prompt.
QWEN3_VL = (
    "{% for message in messages %}"
    "<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for content in message['content'] %}"
    "{% if content['type'] == 'image' or 'image' in content or 'image_url' in content %}"
    "<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif content['type'] == 'video' or 'video' in content %}"
    "<|vision_start|><|video_pad|><|vision_end|>"
    "{% elif 'text' in content %}{{ content['text'] }}{% endif %}"
    "{% endfor %}{% endif %}"
    "<|im_end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

# --- LLaVA-OneVision (Qwen2 language model) -------------------------------------------

#: Images first, then videos, then each text part on its own line, as the -ov-hf
#: checkpoints render a turn.
LLAVA_ONEVISION = (
    "{% for message in messages %}"
    "<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}"
    "{% for content in message['content'] | selectattr('type', 'equalto', 'image') %}<image>{% endfor %}"
    "{% for content in message['content'] | selectattr('type', 'equalto', 'video') %}<video>{% endfor %}"
    "{% for content in message['content'] | selectattr('type', 'equalto', 'text') %}"
    "{% if not loop.first or message['content'] | rejectattr('type', 'equalto', 'text') | list %}{{ '\\n' }}{% endif %}"
    "{{ content['text'] }}"
    "{% endfor %}"
    "{% endif %}"
    "<|im_end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

# --- InternVL3-hf (Qwen2.5 language model) --------------------------------------------

#: ChatML (as the -hf conversions; the remote-code checkpoints add a long default
#: system prompt); an image is ``<IMG_CONTEXT>`` on its own line, which the processor
#: expands to ``<img><IMG_CONTEXT>*N</img>``.
INTERNVL = (
    "{% for message in messages %}"
    "<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for content in message['content'] %}"
    "{% if content['type'] == 'image' %}<IMG_CONTEXT>\n"
    "{% elif content['type'] == 'video' %}<video>\n"
    "{% elif content['type'] == 'text' %}{{ content['text'] }}{% endif %}"
    "{% endfor %}{% endif %}"
    "<|im_end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

# --- HunyuanOCR (HunYuanVL) -----------------------------------------------------------

HY_BOS = "<｜hy_begin▁of▁sentence｜>"
HY_USER = "<｜hy_User｜>"
HY_ASSISTANT = "<｜hy_Assistant｜>"
HY_EOS = "<｜hy_place▁holder▁no▁2｜>"
HY_SYSTEM_END = "<｜hy_place▁holder▁no▁3｜>"
HY_PAD = "<｜hy_▁pad▁｜>"
HY_IMAGE_START = "<｜hy_place▁holder▁no▁100｜>"
HY_IMAGE_END = "<｜hy_place▁holder▁no▁101｜>"
HY_IMAGE = "<｜hy_place▁holder▁no▁102｜>"

#: HunyuanOCR: bos, the (possibly empty) system prompt closed by place-holder no. 3,
#: then each user turn *followed* by ``<｜hy_User｜>`` (the model answers right after
#: it) and each assistant turn closed by eos. Images are start/image/end place-holders.
HUNYUAN_VL = (
    "{{ bos_token }}"
    "{% if messages and messages[0]['role'] == 'system' %}"
    "{% if messages[0]['content'] is string %}{{ messages[0]['content'] }}"
    "{% else %}{% for content in messages[0]['content'] %}{% if 'text' in content %}{{ content['text'] }}{% endif %}{% endfor %}"
    "{% endif %}{% endif %}"
    + HY_SYSTEM_END +
    "{% for message in messages %}"
    "{% if message['role'] == 'user' %}"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for content in message['content'] %}"
    "{% if content['type'] == 'image' or 'image' in content or 'image_url' in content %}"
    + HY_IMAGE_START + HY_IMAGE + HY_IMAGE_END +
    "{% elif 'text' in content %}{{ content['text'] }}{% endif %}"
    "{% endfor %}{% endif %}"
    + HY_USER +
    "{% elif message['role'] == 'assistant' %}"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for content in message['content'] %}{% if 'text' in content %}{{ content['text'] }}{% endif %}{% endfor %}"
    "{% endif %}"
    "{{ eos_token }}"
    "{% endif %}"
    "{% endfor %}"
)

# --- Idefics3 / SmolVLM ---------------------------------------------------------------

#: ``<|im_start|>User:<image>text<end_of_utterance>\nAssistant:`` (a space after the
#: colon unless the turn starts with an image), as SmolVLM renders it.
IDEFICS3 = (
    "<|im_start|>"
    "{% for message in messages %}"
    "{{ message['role'] | capitalize }}"
    "{% if message['content'] is string %}{{ ': ' + message['content'] }}"
    "{% else %}"
    "{% if message['content'][0]['type'] == 'image' %}{{ ':' }}{% else %}{{ ': ' }}{% endif %}"
    "{% for line in message['content'] %}"
    "{% if line['type'] == 'text' %}{{ line['text'] }}"
    "{% elif line['type'] == 'image' %}{{ '<image>' }}{% endif %}"
    "{% endfor %}{% endif %}"
    "<end_of_utterance>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ 'Assistant:' }}{% endif %}"
)

# --- Gemma 3 --------------------------------------------------------------------------

#: gemma-3-it: bos, the system prompt folded into the first user turn, the assistant
#: role named ``model``, images as ``<start_of_image>``, text parts trimmed.
GEMMA3 = (
    "{{ bos_token }}"
    "{% if messages[0]['role'] == 'system' %}"
    "{% if messages[0]['content'] is string %}{% set first_user_prefix = messages[0]['content'] + '\n\n' %}"
    "{% else %}{% set first_user_prefix = messages[0]['content'][0]['text'] + '\n\n' %}{% endif %}"
    "{% set loop_messages = messages[1:] %}"
    "{% else %}{% set first_user_prefix = '' %}{% set loop_messages = messages %}{% endif %}"
    "{% for message in loop_messages %}"
    "{% if message['role'] == 'assistant' %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}{% endif %}"
    "{{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else '') }}"
    "{% if message['content'] is string %}{{ message['content'] | trim }}"
    "{% else %}{% for item in message['content'] %}"
    "{% if item['type'] == 'image' %}{{ '<start_of_image>' }}"
    "{% elif item['type'] == 'text' %}{{ item['text'] | trim }}{% endif %}"
    "{% endfor %}{% endif %}"
    "{{ '<end_of_turn>\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<start_of_turn>model\n' }}{% endif %}"
)

# --- text-only families ---------------------------------------------------------------

#: Qwen3: ChatML; with ``enable_thinking=False`` the generation prompt pre-fills an
#: empty think block, as the real template does.
QWEN3 = (
    "{% for message in messages %}"
    "<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for content in message['content'] %}{% if 'text' in content %}{{ content['text'] }}{% endif %}{% endfor %}"
    "{% endif %}"
    "<|im_end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n{% endif %}"
    "{% endif %}"
)

#: Llama 3.1 Instruct: header ids around the role, each turn closed by ``<|eot_id|>``.
LLAMA3 = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "<|start_header_id|>{{ message['role'] }}<|end_header_id|>\n\n"
    "{% if message['content'] is string %}{{ message['content'] | trim }}"
    "{% else %}{% for content in message['content'] %}{% if 'text' in content %}{{ content['text'] | trim }}{% endif %}{% endfor %}"
    "{% endif %}"
    "<|eot_id|>"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"
)

#: Hunyuan dense instruct models (0.5B-7B): bos, system closed by place-holder no. 3,
#: ``<｜hy_User｜>`` opens a user turn, ``<｜hy_Assistant｜>`` an assistant turn,
#: eos (place-holder no. 2) closes it.
HUNYUAN_DENSE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{% if message['content'] is string %}{% set content = message['content'] %}"
    "{% else %}{% set content = message['content'] | selectattr('type', 'equalto', 'text') | map(attribute='text') | join('') %}{% endif %}"
    "{% if message['role'] == 'system' %}{{ content }}" + HY_SYSTEM_END +
    "{% elif message['role'] == 'user' %}" + HY_USER + "{{ content }}"
    "{% elif message['role'] == 'assistant' %}" + HY_ASSISTANT + "{{ content }}{{ eos_token }}"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}" + HY_ASSISTANT + "{% endif %}"
)

#: Hunyuan-A13B (MoE): ``<|startoftext|>`` opens every turn, ``<|extra_4|>`` closes
#: the system turn, ``<|extra_0|>`` the user turn (and opens the answer), ``<|eos|>``
#: the assistant turn.
HUNYUAN_MOE = (
    "{% for message in messages %}"
    "{% if message['content'] is string %}{% set content = message['content'] %}"
    "{% else %}{% set content = message['content'] | selectattr('type', 'equalto', 'text') | map(attribute='text') | join('') %}{% endif %}"
    "{% if message['role'] == 'system' %}<|startoftext|>{{ content }}<|extra_4|>"
    "{% elif message['role'] == 'user' %}<|startoftext|>{{ content }}<|extra_0|>"
    "{% elif message['role'] == 'assistant' %}{{ content }}<|eos|>"
    "{% endif %}"
    "{% endfor %}"
)


# --- Gemma 2 --------------------------------------------------------------------------

#: gemma-2-it: bos, ``<start_of_turn>user|model`` turns with trimmed text, and, as the
#: real template does, an exception for a ``system`` message (hyport folds the system
#: prompt into the first user turn for such templates).
GEMMA2 = (
    "{{ bos_token }}"
    "{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}"
    "{% for message in messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
    "{% endif %}"
    "{% if message['role'] == 'assistant' %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}{% endif %}"
    "{% if message['content'] is string %}{% set content = message['content'] %}"
    "{% else %}{% set content = message['content'] | selectattr('type', 'equalto', 'text') | map(attribute='text') | join('') %}{% endif %}"
    "{{ '<start_of_turn>' + role + '\n' + content | trim + '<end_of_turn>\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<start_of_turn>model\n' }}{% endif %}"
)

# --- gpt-oss (harmony) ----------------------------------------------------------------

#: gpt-oss: the harmony format. The real template (16 kB: tools, browser and python
#: namespaces, analysis channel) is cut to its plain-chat core: a fixed system header
#: (no ``Current date:`` line, which the real one fills from ``strftime_now`` and so
#: changes every day), a system message as the ``developer`` message, ``<|start|>role
#: <|message|>...<|end|>`` turns and answers on the ``final`` channel. One change for
#: prefix stability: the real template closes the LAST assistant turn with
#: ``<|return|>`` (what training teaches the model to emit) and every earlier one with
#: ``<|end|>``, so a prefix renders differently from the whole; here every answer is
#: closed with ``<|return|>`` (the tokenizer's eos). The analysis channel (``thinking``)
#: is rendered for any assistant turn that has it.
GPT_OSS = (
    "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\n"
    "Knowledge cutoff: 2024-06\n\n"
    "Reasoning: {{ reasoning_effort if reasoning_effort is defined else 'medium' }}\n\n"
    "# Valid channels: analysis, commentary, final. Channel must be included for every message.<|end|>"
    "{% for message in messages %}"
    "{% if message['content'] is string %}{% set content = message['content'] %}"
    "{% else %}{% set content = message['content'] | selectattr('type', 'equalto', 'text') | map(attribute='text') | join('') %}{% endif %}"
    "{% if message['role'] in ('system', 'developer') %}"
    "{% if loop.first %}<|start|>developer<|message|># Instructions\n\n{{ content }}\n\n<|end|>{% endif %}"
    "{% elif message['role'] == 'user' %}<|start|>user<|message|>{{ content }}<|end|>"
    "{% elif message['role'] == 'assistant' %}"
    "{% if message['thinking'] is defined %}<|start|>assistant<|channel|>analysis<|message|>{{ message['thinking'] }}<|end|>{% endif %}"
    "<|start|>assistant<|channel|>final<|message|>{{ content }}<|return|>"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|start|>assistant{% endif %}"
)

# --- DeepSeek-V3 ----------------------------------------------------------------------

DS_BOS = "<｜begin▁of▁sentence｜>"
DS_EOS = "<｜end▁of▁sentence｜>"
DS_PAD = "<｜▁pad▁｜>"
DS_USER = "<｜User｜>"
DS_ASSISTANT = "<｜Assistant｜>"

#: DeepSeek-V3: bos, every system message's text first (the real template collects them
#: all, joined by a blank line), then ``<｜User｜>question<｜Assistant｜>answer`` with
#: each answer closed by eos. Tool calls and tool outputs are left out.
DEEPSEEK_V3 = (
    "{% set ns = namespace(system_prompt='', is_first_sp=true) %}"
    "{% for message in messages %}{% if message['role'] == 'system' %}"
    "{% if message['content'] is string %}{% set content = message['content'] %}"
    "{% else %}{% set content = message['content'] | selectattr('type', 'equalto', 'text') | map(attribute='text') | join('') %}{% endif %}"
    "{% if ns.is_first_sp %}{% set ns.system_prompt = ns.system_prompt + content %}{% set ns.is_first_sp = false %}"
    "{% else %}{% set ns.system_prompt = ns.system_prompt + '\n\n' + content %}{% endif %}"
    "{% endif %}{% endfor %}"
    "{{ bos_token }}{{ ns.system_prompt }}"
    "{% for message in messages %}"
    "{% if message['content'] is string %}{% set content = message['content'] %}"
    "{% else %}{% set content = message['content'] | selectattr('type', 'equalto', 'text') | map(attribute='text') | join('') %}{% endif %}"
    "{% if message['role'] == 'user' %}" + DS_USER + "{{ content }}"
    "{% elif message['role'] == 'assistant' %}" + DS_ASSISTANT + "{{ content }}" + DS_EOS +
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}" + DS_ASSISTANT + "{% endif %}"
)

# --- Llama 3.2 Vision (Mllama) --------------------------------------------------------

#: Llama-3.2-11B-Vision-Instruct: the Llama 3.1 header-id turns, an image as
#: ``<|image|>`` where it stands in the content. Two changes for prefix stability: the
#: real template raises "Prompting with images is incompatible with system messages"
#: and writes its default system block (knowledge cutoff, date) only when no message
#: of the whole conversation has an image, a look-ahead; here a system message is
#: rendered as given, with or without images, and nothing is added without one.
MLLAMA = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "<|start_header_id|>{{ message['role'] }}<|end_header_id|>\n\n"
    "{% if message['content'] is string %}{{ message['content'] | trim }}"
    "{% else %}{% for content in message['content'] %}"
    "{% if content['type'] == 'image' %}<|image|>"
    "{% elif content['type'] == 'text' %}{{ content['text'] | trim }}{% endif %}"
    "{% endfor %}{% endif %}"
    "<|eot_id|>"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"
)

# --- Pixtral (mistral-community/pixtral-12b) ------------------------------------------

#: pixtral-12b: bos, ``[INST]...[/INST]`` user turns with ``[IMG]`` where an image
#: stands (the processor expands it to rows of ``[IMG]`` closed by ``[IMG_BREAK]``,
#: the last by ``[IMG_END]``), answers closed by eos. One change for prefix
#: stability: like every Mistral template, the real one puts the system message at the
#: start of the LAST user turn (so adding a turn moves it); here it opens the first.
PIXTRAL = (
    "{{ bos_token }}"
    "{% if messages[0]['role'] == 'system' %}"
    "{% if messages[0]['content'] is string %}{% set system_message = messages[0]['content'] %}"
    "{% else %}{% set system_message = messages[0]['content'] | selectattr('type', 'equalto', 'text')"
    " | map(attribute='text') | join('') %}{% endif %}"
    "{% set loop_messages = messages[1:] %}"
    "{% else %}{% set loop_messages = messages %}{% endif %}"
    "{% for message in loop_messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('After the optional system message, conversation roles must alternate user/assistant/user/assistant/...') }}"
    "{% endif %}"
    "{% if message['role'] == 'user' %}"
    "{% if loop.first and system_message is defined %}{{ '[INST]' + system_message + '\n\n' }}{% else %}{{ '[INST]' }}{% endif %}"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for chunk in message['content'] %}"
    "{% if chunk['type'] == 'text' %}{{ chunk['text'] }}"
    "{% elif chunk['type'] == 'image' %}{{ '[IMG]' }}"
    "{% else %}{{ raise_exception('Unrecognized content type!') }}{% endif %}"
    "{% endfor %}{% endif %}"
    "{{ '[/INST]' }}"
    "{% elif message['role'] == 'assistant' %}"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for chunk in message['content'] %}{% if chunk['type'] == 'text' %}{{ chunk['text'] }}{% endif %}{% endfor %}{% endif %}"
    "{{ eos_token }}"
    "{% else %}"
    "{{ raise_exception('Only user and assistant roles are supported, with the exception of an initial optional system message!') }}"
    "{% endif %}"
    "{% endfor %}"
)

# --- issue 40: hybrids, position-dependent attention, shared KV, encoder-decoder ------

#: LFM2 (LiquidAI/LFM2-350M): bos, then ChatML turns; eos is ``<|im_end|>``. The real
#: template also renders a tool list in the system turn; left out.
LFM2 = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for content in message['content'] %}{% if 'text' in content %}{{ content['text'] }}{% endif %}{% endfor %}"
    "{% endif %}"
    "<|im_end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

#: Llama 4 (Scout / Maverick Instruct): bos, ``<|header_start|>role<|header_end|>`` and
#: turns closed by ``<|eot|>``. The real template's tool and image branches are left out.
LLAMA4 = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "<|header_start|>{{ message['role'] }}<|header_end|>\n\n"
    "{% if message['content'] is string %}{{ message['content'] | trim }}"
    "{% else %}{% for content in message['content'] %}{% if 'text' in content %}{{ content['text'] | trim }}{% endif %}{% endfor %}"
    "{% endif %}"
    "<|eot|>"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|header_start|>assistant<|header_end|>\n\n{% endif %}"
)
