"""The failures hyport recognises in NPU job logs: what each looks like, means and needs
(``docs/triage.md`` holds the table and the real logs each entry was written from).

A line belongs to the first entry in :data:`CATALOGUE` order that matches, so a specific
entry comes before a broader one. Patterns quote the phrases CANN, HCCL and torch_npu print,
never a bare error code or a word ordinary log noise holds.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Optional

#: Severity of a failure that ended the job.
ERROR = "error"
#: Severity of a finding that did not stop the job but explains how it ran (slowly).
WARNING = "warning"


@dataclass(frozen=True)
class KnownFailure:
    """One recognisable failure: a line matching any of ``patterns`` shows it."""

    key: str  # stable: results files and tests name it
    title: str
    patterns: tuple[str, ...]
    meaning: str
    action: str
    sources: tuple[str, ...]  # the vendored logs the entry was built from
    severity: str = ERROR
    #: This failure usually follows another one (docs/triage.md): listed after the causes.
    consequence: bool = False
    compiled: tuple[tuple[str, re.Pattern], ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "compiled", tuple((needle(p), re.compile(p)) for p in self.patterns))

    def matches(self, line: str) -> bool:
        return any(text in line and rx.search(line) for text, rx in self.compiled)

    def find(self, line: str) -> Optional[re.Match]:
        """The first match of this failure's patterns in ``line`` (None for none)."""
        found = [m for text, rx in self.compiled if text in line for m in [rx.search(line)] if m]
        return min(found, key=lambda m: m.start()) if found else None


#: Escapes that stand for one literal character.
_LITERAL_ESCAPES = set(".^$*+?{}[]()|\\/-:,'\" _=<>!#&%@~`")


def needle(pattern: str) -> str:
    """The longest run of plain text every match of ``pattern`` contains ("" for none).

    Searching a line for a plain string is far cheaper than running a regular expression on
    it, so a pattern is tried only on lines that hold its needle. Groups and classes are
    skipped (an alternative need not appear); a character made optional by ``?``, ``*`` or
    ``{`` ends the run without it; a pattern with a top-level ``|`` has no needle.
    """
    runs, current, i = [], "", 0
    while i < len(pattern):
        char = pattern[i]
        if char == "\\" and i + 1 < len(pattern):
            if pattern[i + 1] in _LITERAL_ESCAPES:
                current += pattern[i + 1]
            else:  # \d, \b, \w, \S ...: a class or an assertion
                runs.append(current)
                current = ""
            i += 2
            continue
        if char in "([":
            runs.append(current)
            current, depth, close = "", 0, ")" if char == "(" else "]"
            while i < len(pattern):
                if pattern[i] == "\\":
                    i += 2
                    continue
                depth += pattern[i] == char
                depth -= pattern[i] == close
                i += 1
                if depth == 0:
                    break
            continue
        if char == "|":
            return ""
        if char in "?*{":
            current = current[:-1]
        if char in ".?*+{}^$":
            runs.append(current)
            current = ""
        else:
            current += char
        i += 1
    runs.append(current)
    return max(runs, key=len)


CATALOGUE: tuple[KnownFailure, ...] = (
    # First, a cause; what each pattern takes and leaves: docs/triage.md, on
    # ``hyport_attention_refused``. ``: `` after a class name: its ``raise`` line or an
    # import is not the failure; [\w-]{1,32}: a bounded backend name.
    KnownFailure("hyport_attention_refused", "hyport attention refused an argument or feature",
        patterns=(
            r"\bUnsupportedAttentionArgument: ",
            r"\bFlashAttnUnsupported: ",
            r"\b(?!ValueError\b)\w+: hyport attention(?: \([\w-]{1,32}\))?: ",
        ),
        meaning=("The rank stopped in hyport's own attention, not on the NPU: the model asked "
                 "the attention hyport swapped in (the attn_implementation it registers, which "
                 "packed training always uses, or its flash-attn drop-in for remote code) for an "
                 "argument or feature it cannot compute exactly: a logit soft-cap (Gemma 2), "
                 "attention sinks (s_aux, sinks), ALiBi slopes, a position bias, a float mask "
                 "carrying a bias on the NPU, a paged KV cache, the softmax itself. Dropping it "
                 "would train (or run) a different model than the one asked for, so hyport "
                 "raised UnsupportedAttentionArgument / FlashAttnUnsupported and the rank "
                 "stopped. The line names the argument or feature and the module. Other ranks "
                 "then wait in their next collective until it times out: an HCCL or gloo "
                 "timeout after this line is its consequence."),
        action=("Run this model on transformers' own attention: for training, `packing=false` "
                "(packing needs hyport's attention) with `attn_implementation='eager'` "
                "(`hyport train --packing false --attn-implementation eager ...`); for inference, "
                "`attn_implementation='eager'`. To see beforehand which argument or feature of "
                "which layer hyport's attention refuses, check the model with "
                "`hyport attention --model-path <model>` (stage 02)."),
        sources=("unsupported_attention_argument.gemma2-torchrun.log",
                 "flash_attn_unsupported.dropin-softcap.log"),
    ),
    # transformers' own refusals of an attn_implementation, 4.57 and 5.x alike (their
    # exception lines: the traceback's source lines quote none of these phrases whole).
    KnownFailure("attention_not_runnable", "an attention the device or the model cannot run",
        patterns=(
            r"\b(?:ImportError|ValueError): FlashAttention\d has been toggled on, but it cannot be used",
            r"\bValueError: You are attempting to use Flash Attention \d with a model not initialized on GPU "
            r"and with no GPU available",
            r"\bValueError: \w{1,100} does not support (?:Flash Attention|an attention implementation through) ",
            r"\bValueError: Specified `attn_implementation=\"[^\"]{0,200}\"` is not supported",
            r"\bNotImplementedError: FlexAttention does not support backward on CPU",
        ),
        meaning=("transformers refused the attn_implementation while loading or running the model, "
                 "before any step: FlashAttention 2, 3 and 4 need the flash-attn package on a CUDA "
                 "GPU (FlashAttention 2 also runs on an Ascend NPU, through torch_npu), never on a "
                 "CPU; torch's flex_attention has no backward on a CPU; sdpa and flex_attention "
                 "need the model's support; and a name transformers does not know (a typo, or a "
                 "hyport_* name in a process that did not register it) is not supported. hyport's "
                 "plans refuse a name the device cannot run for the stage (flex_attention on a CPU "
                 "in stages 03 and 04) or no worker knows, and every process hyport starts "
                 "registers hyport's own names, so a run started by hyport meets this only for a "
                 "model without that support, or a job started another way."),
        action=("Use `attn_implementation=auto` (the stage chooses: eager, or on an NPU in stage 03 "
                "hyport's fused kernel once it proves itself), or a name this device runs: on a CPU "
                "eager, sdpa, hyport_torch, hyport_npu_emulated, and flex_attention in stage 05 "
                "(its reload only loads the model); on an Ascend NPU also hyport_npu_fused and "
                "flash_attention_2; on CUDA flash_attention_2 only with flash-attn installed, and "
                "flex_attention. "
                "`attention_choices(device, work=...)` (`hyport_lib.npu_attention.runnable`) lists "
                "this host's, as the form's list does; a model without SDPA support takes eager."),
        sources=("attention_not_runnable.infer-flash_attention_2-cpu.log",
                 "attention_not_runnable.infer-flash_attention_2-cpu-transformers457.log"),
    ),
    KnownFailure("hccl_port_in_use", "HCCL port already in use",
        patterns=(
            r"Failed to bind the IP port\. Reason: The IP address and port have been bound already",
            r"host nic listen start failed, port\[\d+\]",
            # Bounded gaps: an unbounded ``.*`` ran to the line's end from every
            # ``[HcclSocket][Listen]`` of a line repeating it (quadratic on a long line).
            r"\[HcclSocket\]\[Listen\].{0,200}listen on ip\[[^\]]{0,64}\] and specific port\[\d+\] fail",
        ),
        meaning=("HCCL could not listen on its port because another process already holds it: "
                 "a second job on the same host or card, or a process left over from an earlier "
                 "run. On the host, HCCL takes its ports from HCCL_IF_BASE_PORT (60000 by "
                 "default) upwards, one per rank ('host nic listen start failed, port[600xx]'). "
                 "On the card's own network, each process listens on one NPU port, 16666 by "
                 "default ('listen on ip[<card IP>] and specific port[16666] fail'), so two "
                 "processes on one card collide there. Every job uses the same ports unless "
                 "told otherwise."),
        action=("Find who holds the port: `npu-smi info` lists the processes on the cards, "
                "`ss -ltnp | grep ':600'` the host's; stop a leftover run. To run two jobs side by "
                "side, give each its own ports: for a host port, `export HCCL_IF_BASE_PORT=61000` "
                "in one of them (a range that does not overlap the other job's) and a different "
                "torchrun `--master-port`; for the NPU port (16666, several processes on one card), "
                "`export HCCL_NPU_SOCKET_PORT_RANGE=auto` (and `HCCL_HOST_SOCKET_PORT_RANGE=auto`) "
                "or a range of its own per job. `hyport env` checks that the host range is free "
                "before a job starts."),
        sources=("hccl_port_in_use.vllm-ascend-405.log", "hccl_port_in_use.vllm-ascend-4725.log",
                 "hccl_connect_timeout.vllm-ascend-1955.log"),
    ),
    KnownFailure("hccl_link_error", "HCCL link between NPUs failed",
        patterns=(
            r"Transport init error\. Reason: \[Create\]\[DestLink\]Create Dest error",
            r"Execution_Error_ROCE_CQE\(EI0013\)",
            r"An error CQE occurred during operator execution",
        ),
        meaning=("The network link HCCL uses between two NPUs failed: it could not be set up "
                 "(EI0009, transport init) or broke during a collective (EI0013, an error CQE "
                 "on the RoCE link). Either the network between the devices is down or "
                 "flapping, or the process on the other end exited first."),
        action=("Read the peer rank's log first: when it failed earlier, that failure is the cause. "
                "Otherwise check the NPU network on both hosts: `hccn_tool -i <device> -link -g` "
                "(link up?), `hccn_tool -i <device> -net_health -g`, and "
                "`hccn_tool -i <device> -ping -g address <peer device IP>`; the device IPs are in "
                "the error line."),
        sources=("hccl_link_error.vllm-ascend-3162.log", "hccl_link_error.vllm-ascend-7384.log"),
        consequence=True,
    ),
    KnownFailure("hccl_connect_timeout", "HCCL connection set-up timed out",
        patterns=(
            r"Getting socket times out\. Reason: Remote Rank did not send the data in time",
            r"wait socket establish timeout, role\[\d+\] rank\[\d+\] timeout\[\d+\]",
        ),
        meaning=("While the ranks were building their communicator, a peer rank did not connect "
                 "within HCCL_CONNECT_TIMEOUT (120 s by default). Usually that rank failed or is "
                 "still busy (loading weights, compiling) rather than the network being down."),
        action=("Look at the other ranks' logs for an earlier error and fix that first. If every "
                "rank is healthy but slow to reach the first collective, raise the limit on all of "
                "them, e.g. `export HCCL_CONNECT_TIMEOUT=600`. Check that every rank uses the same "
                "master address and port."),
        sources=("hccl_connect_timeout.vllm-ascend-486.log",
                 "hccl_connect_timeout.llama-factory-5071.log",
                 "hccl_connect_timeout.vllm-ascend-1955.log"),
        consequence=True,
    ),
    KnownFailure("hccl_exec_timeout", "HCCL collective timed out",
        patterns=(
            r"The wait execution of the Notify register times out",
            r"Watchdog caught collective operation timeout: WorkHCCL\(",
        ),
        meaning=("A collective (all-reduce, broadcast...) waited longer than its limit for other "
                 "ranks: HCCL_EXEC_TIMEOUT on the device (EI0002, about 1800 s by default) or the "
                 "process-group watchdog on the host. One rank fell behind: it crashed, hangs, or "
                 "runs a different number of steps (uneven data shards)."),
        action=("Find the rank that did not arrive: the earliest other error across the rank logs "
                "is the cause. Make every rank see the same number of batches. If one step really "
                "takes longer (a first graph compile), raise both limits: "
                "`export HCCL_EXEC_TIMEOUT=3600` and `timeout=` of `init_process_group`."),
        sources=("hccl_exec_timeout.vllm-ascend-3413.log", "hccl_exec_timeout.vllm-ascend-382.log"),
        consequence=True,
    ),
    # Not a consequence: in the waiting node's log it is the whole failure (its traceback's
    # ``raise RendezvousTimeoutError`` source line would stay unexplained beside a
    # consequence). Across nodes it is an echo (across_nodes.ECHOES): the node that printed
    # it waited for one that never came. The qualified name: torch's last traceback line,
    # not that source line.
    KnownFailure("rendezvous_join_timeout", "a node never joined torchrun's rendezvous",
        patterns=(r"elastic\.rendezvous\.api\.RendezvousTimeoutError\b",),
        meaning=("Not every node joined torchrun's c10d rendezvous within the join timeout "
                 "(join_timeout_s, torchrun's `--rdzv-conf join_timeout`), so torchrun on the node "
                 "that printed this gave up before starting any rank. This node did not fail: it "
                 "waited for a node that never arrived, one not started (or started after the "
                 "timeout), started with another rdzv_id, nnodes or master_port, or unable to "
                 "reach master_addr:master_port."),
        action=("Start the missing node: node 0's record names it and gives the command "
                "(`node K never arrived; start node_rank K with: hyport train ... --node-rank K`). "
                "From that host, check that master_addr:master_port answers (`hyport env` with the "
                "job's MASTER_ADDR and MASTER_PORT set checks it; a firewall or a wrong address "
                "times out), and that it uses the same rdzv_id, nnodes and master_port as node 0. "
                "Start every node within join_timeout_s of the first, or raise join_timeout_s "
                "when the hosts start minutes apart. When the missing node did start, its own "
                "log (`logs/node<K>.log`) says why it stopped."),
        sources=("rendezvous_join_timeout.node1-never-joined.log",),
    ),
    KnownFailure("npu_out_of_memory", "device out of memory",
        patterns=(r"NPU out of memory\. Tried to allocate",),
        meaning=("The NPU's memory (HBM) is full: the model, its activations and the optimizer "
                 "state need more than the card has free, or another process holds part of it."),
        action=("Check `npu-smi info` for other processes on the card. Then lower the batch size or "
                "sequence length, turn on gradient checkpointing, or shard more (ZeRO-3, more "
                "cards). When the message shows reserved memory far above allocated, reduce "
                "fragmentation: `export PYTORCH_NPU_ALLOC_CONF=expandable_segments:True`."),
        sources=("npu_oom.vllm-ascend-1127.log", "npu_oom.llama-factory-5491.log"),
    ),
    KnownFailure("device_in_use", "NPU held by another process",
        patterns=(
            r"Failed to initialize the HCCP process\. Reason: Maybe the last training process is running",
            r"dcmi module initialize failed\. ret is -8005",
        ),
        meaning=("The card could not be opened because something else holds it: a process of an "
                 "earlier run that has not exited (EJ0001), or, in a container, usually another "
                 "container that has the same card (-8005 from the DCMI library)."),
        action=("`npu-smi info` lists the processes on each card; stop the leftover ones and wait "
                "about 10 s before starting again. In a container, pass only cards no other "
                "container uses (`--device /dev/davinciN`), or choose free cards with "
                "`ASCEND_RT_VISIBLE_DEVICES`. When no other process holds the card, -8005 can also "
                "come from a container without the control devices or the dcmi and driver mounts "
                "(`hyport env` checks them); some hosts needed `--privileged`."),
        sources=("device_in_use.llama-factory-3839.log", "device_in_use.vllm-ascend-2698.log"),
    ),
    # Before the CANN / torch_npu entries: without a usable driver nothing above it can start.
    KnownFailure("driver_mismatch", "NPU driver missing or not usable",
        patterns=(r"libascend_hal\.so: cannot open shared object file",),
        meaning=("torch_npu could not load the NPU driver's user-space library (libascend_hal.so, "
                 "which the driver package installs under /usr/local/Ascend/driver/lib64/driver): "
                 "the driver is not installed on this host, or, in a container, the host's "
                 "/usr/local/Ascend/driver was not mounted. Device nodes alone (--device "
                 "/dev/davinciN) are not enough."),
        action=("On the host: `npu-smi info` and `cat /usr/local/Ascend/driver/version.info` show "
                "whether a driver is installed and which. In a container, mount it: "
                "`-v /usr/local/Ascend/driver:/usr/local/Ascend/driver` (plus "
                "`-v /usr/local/bin/npu-smi:/usr/local/bin/npu-smi` and the devices "
                "`/dev/davinci_manager`, `/dev/devmm_svm`, `/dev/hisi_hdc`); `hyport env` checks the "
                "mount. Once the library loads, compare the driver with the version-pairing table "
                "in the CANN release notes; outside it, upgrade firmware first, then the driver, "
                "and reboot."),
        sources=("driver_mismatch.vllm-ascend-1440.log",),
    ),
    KnownFailure("version_mismatch", "torch_npu and CANN libraries do not match",
        # At most 16 folders below torch_npu/ or Ascend/: ``\S*`` ran to the end of the
        # path from every ``Ascend/`` of a long LD_LIBRARY_PATH (quadratic on a long line).
        patterns=(r"(?:torch_npu|Ascend)/(?:[^\s/]*/){0,16}[^\s/]*\.so: undefined symbol:",),
        meaning=("A shared library of torch_npu or of CANN (ATB in nnal) looks for a function the "
                 "other does not have: they come from releases that were not built for each other."),
        action=("Install the torch_npu release that its compatibility table pairs with the installed "
                "CANN (or CANN, nnal and kernels matching the torch_npu). Compare "
                "`pip show torch torch_npu` with the CANN version in "
                "`/usr/local/Ascend/ascend-toolkit/latest/*/ascend_toolkit_install.info`; "
                "`hyport env` records driver, firmware, CANN and torch_npu versions."),
        sources=("version_mismatch.vllm-ascend-117.log", "version_mismatch.torch_npu-99.log"),
    ),
    KnownFailure("cann_init_failed", "CANN failed to start",
        patterns=(
            r"AclSetCompileopt\(aclCompileOpt::ACL_PRECISION_MODE, precision_mode\), error code is 500001",
            r"init runtime platform info failed, SocVersion",
        ),
        meaning=("torch_npu could not start CANN's operator compiler when it first set the device. "
                 "The CANN toolkit, its kernels package and the chip do not fit together, the CANN "
                 "environment is not set up in this shell, or a Python package CANN needs is "
                 "missing or too new (numpy 2 with an older CANN)."),
        action=("Source the toolkit (`source /usr/local/Ascend/ascend-toolkit/set_env.sh`), check "
                "that the kernels package is the one for this chip (`npu-smi info` names it) and "
                "that torch_npu's table pairs it with this CANN, and install CANN's Python "
                "dependencies (`pip install 'numpy<2' decorator sympy cffi pyyaml attrs psutil`)."),
        sources=("cann_init_failed.vllm-ascend-692.log",),
    ),
    KnownFailure("unsupported_operator", "operator or dtype not supported on this NPU",
        patterns=(
            r"No supported Ops kernel and engine are found for \[",
            r"Optype \[\w+\] of Ops kernel \[\w+\] is unsupported",
            r"not implemented for DT_\w+, should be in dtype support list",
            r"scalar_type:\w+\s*is not surpported",
            r"Could not run '[\w:.]+' with arguments from the '(?:NPU|PrivateUse1)' backend",
        ),
        meaning=("An operator was asked for with an input the NPU's operator library does not "
                 "have: the operator itself, or this dtype or data format of it, is missing on this "
                 "chip or in this CANN release."),
        action=("The line names the operator and dtype. Cast the input to a supported dtype "
                "(int64 for uint64, float32 or bfloat16 for float64), replace the operator with "
                "supported ones, or run that step on the CPU explicitly (`.cpu()`, then back). "
                "A newer CANN / torch_npu may add it; Atlas 300I (310P) cards have fewer "
                "operators and formats than Atlas A2."),
        sources=("unsupported_op.vllm-ascend-4454.log", "unsupported_op.vllm-ascend-811.log",
                 "unsupported_dtype.torch_npu-158.log"),
    ),
    KnownFailure("aicore_exception", "AI Core / vector core kernel fault",
        patterns=(
            r"RTS_HWTS: aicore exception",
            r"The (?:aicore|vector core) execution is abnormal",
            r"there is an exception of fftsplus ai(?:core|vector) error",
            r"\[aicore exception\]",
        ),
        meaning=("An operator's kernel failed on the device's compute cores. Common causes: an "
                 "input out of range (an index or token id beyond the table), a kernel bug in this "
                 "CANN release, or a wrong shape or format given to a fused NPU operator. Because "
                 "operators run asynchronously, the Python traceback may point at a later line."),
        action=("Run again with `export ASCEND_LAUNCH_BLOCKING=1` so the traceback stops at the "
                "operator that failed, and look in the plogs (`grep -rn aicore "
                "$ASCEND_PROCESS_LOG_PATH` or `~/ascend/log/debug`) for the kernel name. Check the "
                "inputs of that operator (e.g. ids < vocabulary size); try it on the CPU."),
        sources=("aicore_exception.llama-factory-3670.log", "aicore_exception.torch_npu-66.log"),
    ),
    KnownFailure("cpu_fallback", "operator falls back to the CPU",
        patterns=(r"is not currently supported on the NPU backend and will fall back to run on the CPU",),
        meaning=("torch_npu has no NPU kernel for this operator, so it copies the inputs to the "
                 "CPU, runs it there and copies back: the job goes on, more slowly."),
        action=("If the operator runs every step, replace it (e.g. `torch.isin` by an "
                "`(a.unsqueeze(-1) == b).any(-1)` comparison) or move to a torch_npu release that "
                "implements it. Once at start-up it can be left alone."),
        sources=("hccl_connect_timeout.llama-factory-5071.log", "cpu_fallback.torch_npu-51.log"),
        severity=WARNING,
    ),
)

#: Every entry by key.
BY_KEY: dict[str, KnownFailure] = {entry.key: entry for entry in CATALOGUE}

#: The plain text some pattern needs: a line holding none of them is no failure, which
#: a long log learns with a few substring searches per line.
NEEDLES = tuple(sorted({text for entry in CATALOGUE for text, _ in entry.compiled}))


def recognise(line: str) -> KnownFailure | None:
    """The first catalogue entry whose patterns match ``line``."""
    if "" not in NEEDLES and not any(map(line.__contains__, NEEDLES)):
        return None
    return next((entry for entry in CATALOGUE if entry.matches(line)), None)
