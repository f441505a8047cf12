"""CPU-CI SASS contracts: the machine code of the kernels keeps the properties their speed rests on.

cuobjdump --dump-sass (PyPI nvidia-cuda-cuobjdump, which needs nvdisasm from
nvidia-cuda-nvdisasm on the PATH) disassembles sm_90 cubins built by nvfp4_kernels.build. Contracts:

* vec8 dequant (fp16 and bf16): 128-bit global stores, 32-bit packed loads and no byte loads of
  the packed data beyond the scale bytes, no local memory (LDL/STL), no CALL (a software
  conversion routine);
* GEMV: tensor-core HMMA instructions, no local memory, the table decode's PRMT lookups present;
* fused_mma: HMMA, no local memory, every global load a 16- or 8-byte asynchronous copy into
  shared memory (LDGSTS.E.BYPASS.128 for the weights and activations, LDGSTS.E.64 for the
  scale bytes), every shared load of an operand 128 bits wide, no CALL, and the table decode's
  PRMT lookups present; its K loops (the table throughout, and the per-step range test with both
  decodes) issue exactly the design's PRMTs, LOP3s and FMULs for their words and tables, and
  each step's MMAs once;
* fused_wgmma (sm_90a): warpgroup MMAs (HGMMA) with A from registers, the weights loaded with
  16-byte global loads straight into registers (no asynchronous copy, no shared-memory load of
  an operand), no local memory, no CALL, and the table decode's PRMT lookups present; in
  fused_mma's K order, one 16-byte load a row and step on either layout and the PRMTs of two
  decode tables a row and step (the natural order, retired, needed eight);
* the split-K finalize kernel (in each of the GEMV's, fused_mma's and fused_wgmma's files), at
  both vector widths: one chunk of eight partial loads in flight (16-byte loads at width 4),
  8-byte bias loads and output stores at width 4, 16-bit ones at width 1, no local memory;
* scalar dequant: 16-bit global stores.

Each checker is also run on a deliberately bad kernel compiled here, to prove it reports the
violation it exists for (a contract that cannot fail proves nothing).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from nvfp4_kernels import build


def _tool_dir() -> Path | None:
    for entry in sys.path:
        candidate = Path(entry) / "nvidia" / "cu13" / "bin"
        if (candidate / "cuobjdump").is_file() and (candidate / "nvdisasm").is_file():
            return candidate
    found = shutil.which("cuobjdump")
    if found and shutil.which("nvdisasm"):
        return Path(found).parent
    return None


TOOLS = _tool_dir()
try:
    build.find_nvcc()
    HAVE_NVCC = True
except build.NvccNotFound:
    HAVE_NVCC = False

pytestmark = [
    pytest.mark.skipif(TOOLS is None, reason="cuobjdump/nvdisasm not found: pip install "
                                             "nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm"),
    pytest.mark.skipif(not HAVE_NVCC, reason="nvcc is not installed (set CUDA_HOME or add the CUDA "
                                             "toolkit's bin/ to PATH)"),
]


def dump_sass(cubin: Path) -> dict[str, list[str]]:
    """{mangled function name: [SASS instruction text, ...]} of one cubin."""
    env = dict(os.environ, PATH=f"{TOOLS}{os.pathsep}{os.environ.get('PATH', '')}")
    text = subprocess.run([str(TOOLS / "cuobjdump"), "--dump-sass", str(cubin)], capture_output=True,
                          text=True, check=True, env=env).stdout
    functions: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        header = re.match(r"\s*Function : (\S+)", line)
        if header:
            current = functions.setdefault(header.group(1), [])
            continue
        instr = re.match(r"\s*/\*[0-9a-f]{4,}\*/\s+(.*?);", line)
        if instr and current is not None:
            current.append(instr.group(1).strip())
    return functions


def opcodes(instructions: list[str]) -> list[str]:
    """The opcode (with modifiers) of each instruction, predicates stripped."""
    out = []
    for ins in instructions:
        ins = re.sub(r"^@!?U?P\w+\s+", "", ins)
        out.append(ins.split()[0] if ins else "")
    return out


def _local_memory(ops: list[str]) -> list[str]:
    return [o for o in ops if o.startswith(("LDL", "STL"))]


def check_vec8(instructions: list[str]) -> list[str]:
    """Violations of the vec8 contract (empty when it holds)."""
    ops = opcodes(instructions)
    problems = []
    if not any(o.startswith("STG.E.128") for o in ops):
        problems.append("no 128-bit global store (STG.E.128)")
    if any(o.startswith("STG") and not o.startswith("STG.E.128") for o in ops):
        problems.append("narrow global stores besides the 16-byte one")
    loads = [o for o in ops if o.startswith("LDG")]
    if not any(re.fullmatch(r"LDG\.E(\.(CONSTANT|EF|EL|LU|NA|LTC\w+|\d+))*", o) and ".U8" not in o
               and ".U16" not in o and ".64" not in o and ".128" not in o for o in loads):
        problems.append("no 32-bit packed load (LDG.E)")
    if _local_memory(ops):
        problems.append(f"local memory: {sorted(set(_local_memory(ops)))}")
    if any(o.startswith("CALL") for o in ops):
        problems.append("CALL to a subroutine (software conversion?)")
    return problems


#: fewest PRMT instructions a GEMV or fused instantiation may have: one K step's table lookups
#: for one 16-row tile are 80 PRMTs plus 16 to build its four tables
MIN_TABLE_PRMT = 64


def table_decode_problems(ops: list[str]) -> list[str]:
    """The table decode of mma_decode.cuh (4 PRMTs per table, 10 per 8 weights) must be there."""
    prmts = sum(o.startswith("PRMT") for o in ops)
    if prmts < MIN_TABLE_PRMT:
        return [f"{prmts} PRMT instructions, fewer than {MIN_TABLE_PRMT}: the table decode is missing"]
    return []


def check_gemv(instructions: list[str]) -> list[str]:
    ops = opcodes(instructions)
    problems = []
    if not any(o.startswith("HMMA") for o in ops):
        problems.append("no tensor-core HMMA instruction")
    if _local_memory(ops):
        problems.append(f"local memory: {sorted(set(_local_memory(ops)))}")
    return problems + table_decode_problems(ops)


def check_fused(instructions: list[str]) -> list[str]:
    """Violations of the fused tensor-core kernel's contract (empty when it holds)."""
    ops = opcodes(instructions)
    problems = check_gemv(instructions)
    copies = [o for o in ops if o.startswith("LDGSTS")]
    if not any(o.startswith("LDGSTS.E.BYPASS.128") for o in copies):
        problems.append("no 16-byte asynchronous copy bypassing L1 (LDGSTS.E.BYPASS.128)")
    narrow = [o for o in copies if not (o.startswith("LDGSTS.E.BYPASS.128") or o.startswith("LDGSTS.E.64"))]
    if narrow:
        problems.append(f"asynchronous copies narrower than 8 bytes: {sorted(set(narrow))}")
    if any(o.startswith("LDG") for o in ops if not o.startswith("LDGSTS") and not o.startswith("LDGDEPBAR")):
        loads = sorted({o for o in ops if o.startswith("LDG") and not o.startswith(("LDGSTS", "LDGDEPBAR"))})
        # the global scale (LDG.E.CONSTANT), the bias (.U16) and, in the tile's last split block,
        # the other splits' fp32 partials read through L2 (__ldcg: LDG.E.STRONG.GPU)
        allowed = ("LDG.E.CONSTANT", "LDG.E.STRONG.GPU")
        if any(".128" not in o and ".U16" not in o for o in loads if o not in allowed):
            problems.append(f"direct global loads besides the global scale, the bias and the split-K "
                            f"partials: {loads}")
    shared = [o for o in ops if o.startswith("LDS")]
    if not any(o.startswith("LDS.128") for o in shared):
        problems.append("no 128-bit shared load (LDS.128) of the operands")
    if any(o.startswith("CALL") for o in ops):
        problems.append("CALL to a subroutine (software conversion?)")
    return problems


def check_wgmma(instructions: list[str], nact: int = 256, ring: int = 0) -> list[str]:
    """Violations of the fused_wgmma kernel's contract (empty when it holds), for a kernel of
    ``nact`` activation rows a block (the wgmma's N) and a ring of ``ring`` weight steps a thread
    (0: the register prefetch, the weights' 16-byte loads straight into registers)."""
    ops = opcodes(instructions)
    problems = []
    hgmma = [i for i in instructions if "HGMMA" in i]
    if not hgmma:
        problems.append("no warpgroup MMA (HGMMA)")
    elif not all(re.search(rf"HGMMA\.64x{nact}x16\.F32(\.BF16)? R\d+, R\d+, gdesc", i) for i in hgmma):
        problems.append(f"an HGMMA that is not m64n{nact}k16 with A from registers")
    if ring == 0:
        if not any(o.startswith("LDG.E.128") for o in ops):
            problems.append("no 16-byte global load (LDG.E.128) of the packed weights")
        if any(o.startswith(("LDGSTS", "LDS")) for o in ops):
            problems.append("an asynchronous copy or shared-memory load: the weights must go to registers only")
    else:
        problems += ring_copy_problems(ops, ring)
    if _local_memory(ops):
        problems.append(f"local memory: {sorted(set(_local_memory(ops)))}")
    if any(o.startswith("CALL") for o in ops):
        problems.append("CALL to a subroutine (software conversion?)")
    return problems + table_decode_problems(ops)


def ring_copy_problems(ops: list[str], ring: int) -> list[str]:
    """A thread's ring of ``ring`` weight steps (fused_wgmma.cu's ThreadRing): each step's two rows
    of 16 code bytes copied by 16-byte cp.async bypassing L1 and their two 4-byte scale words by
    4-byte cp.async (``ring`` steps ahead in the prologue, one step in the loop), read back with a
    16-byte shared load a row and a 16-bit one a row; no 16-byte global load of the weights."""
    problems = []
    copies = 2 * (ring + 1)
    if _count(ops, "LDGSTS.E.BYPASS.128") != copies:
        problems.append(f"{_count(ops, 'LDGSTS.E.BYPASS.128')} 16-byte cp.async of the codes, not 2 rows x "
                        f"{ring + 1} (LDGSTS.E.BYPASS.128)")
    if sum(o == "LDGSTS.E" for o in ops) != copies:
        problems.append(f"not 2 rows x {ring + 1} 4-byte cp.async of the scale words (LDGSTS.E)")
    if _count(ops, "LDS.128") != 2 or _count(ops, "LDS.U16") != 2:
        problems.append("not one 16-byte and one 16-bit shared load a row and step (LDS.128, LDS.U16)")
    if any(o.startswith("LDG.E.128") for o in ops):
        problems.append("a 16-byte global load (LDG.E.128): the ring's weights come through cp.async")
    return problems


#: mma_decode.cuh's kFinalizeChunk: the splits whose partials a finalize thread loads before it adds them
FINALIZE_CHUNK = 8


def check_finalize(instructions: list[str], vec: int) -> list[str]:
    """Violations of the split-K finalize kernel's contract at vector width ``vec``
    (mma_decode.cuh): one chunk's partial loads issued together, 16 bytes each at width 4 and 4
    bytes at width 1, the bias and the outputs in one 8-byte access a thread at width 4 (16-bit
    ones at width 1), no local memory."""
    ops = opcodes(instructions)
    problems = []
    partial_loads = [o for o in ops if o.startswith("LDG") and ".U16" not in o and ".64" not in o]
    wide = "LDG.E.128" if vec == 4 else "LDG.E"
    if len(partial_loads) != FINALIZE_CHUNK or any(o.split(".CONSTANT")[0] != wide for o in partial_loads):
        problems.append(f"partial loads {partial_loads}, not {FINALIZE_CHUNK} x {wide} (one chunk of splits)")
    bias = [o for o in ops if o.startswith("LDG") and o not in partial_loads]
    stores = [o for o in ops if o.startswith("STG")]
    want_bias, want_store = (["LDG.E.64"], ["STG.E.64"]) if vec == 4 else (["LDG.E.U16"], ["STG.E.U16"])
    if [o.split(".CONSTANT")[0] for o in bias] != want_bias:
        problems.append(f"bias loads {bias}, not {want_bias}")
    if stores != want_store:
        problems.append(f"output stores {stores}, not {want_store}")
    if _local_memory(ops):
        problems.append(f"local memory: {sorted(set(_local_memory(ops)))}")
    return problems


def check_scalar(instructions: list[str]) -> list[str]:
    ops = opcodes(instructions)
    return [] if any(o.startswith("STG.E.U16") for o in ops) else ["no 16-bit global store (STG.E.U16)"]


@pytest.fixture(scope="session")
def library_cubins() -> dict[str, Path]:
    """Each .cu of the library compiled to its sm_90 cubin (build.compile_objects, in the build
    cache under a key of the sources, flags and nvcc, which test_cuda_build's compile test shares),
    with ptxas's report beside it."""
    return build.compile_objects("cubin", "sm_90")


@pytest.fixture(scope="session")
def kernel_sass(library_cubins) -> dict[str, list[str]]:
    functions: dict[str, list[str]] = {}
    for path in library_cubins.values():
        functions.update(dump_sass(path))
    return functions


def _dev_cubin_sass(out_dir: Path, *defines: str) -> dict[str, list[str]]:
    """The SASS of scripts/ws_dev/fused_ra.cu (the fused_wgmma dev variants, built as ra_dev.py
    builds them) with extra ``-D`` defines."""
    repo = Path(__file__).resolve().parents[1]
    cubin = out_dir / "fused_ra.cubin"
    done = subprocess.run([build.find_nvcc(), *build.BASE_FLAGS, "-arch=sm_90a", "-cubin", *(f"-D{d}" for d in defines),
                           f"-I{repo / 'kernels' / 'cuda'}", f"-I{repo / 'scripts' / 'ws_dev'}", "-o", str(cubin),
                           str(repo / "scripts" / "ws_dev" / "fused_ra.cu")], capture_output=True, text=True,
                          check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return {name: ins for name, ins in dump_sass(cubin).items() if "nvfp4_fused_wgmma_kernel" in name}


@pytest.fixture(scope="session")
def dev_wgmma_sass(tmp_path_factory) -> dict[str, list[str]]:
    """Every fused_wgmma kernel of the dev build: since every library tile has a ring (the 192-row
    tile's since the twenty-fourth session), the register-prefetch kernels (RING = 0) that the dev
    variants still launch are only here."""
    return _dev_cubin_sass(tmp_path_factory.mktemp("dev"))


def _mangled(tiled: bool, nact: int, minb: int, stages: int, staged: bool, ring: int) -> str:
    """The template arguments' part of a fused_wgmma kernel's mangled name."""
    return f"Lb{int(tiled)}ELi{nact}ELi{minb}ELi{stages}ELb{int(staged)}ELi{ring}E"


def _select(functions: dict[str, list[str]], fragment: str, dtype: str) -> dict[str, list[str]]:
    tag = {"half": "6__half", "bf16": "13__nv_bfloat16"}[dtype]
    chosen = {name: ins for name, ins in functions.items() if fragment in name and tag in name}
    assert chosen, f"no {fragment} instantiation for {dtype} in the SASS ({sorted(functions)})"
    return chosen


@pytest.mark.parametrize("dtype", ["half", "bf16"])
def test_vec8_contract(kernel_sass, dtype: str) -> None:
    for name, ins in _select(kernel_sass, "nvfp4_dequant_vec8_kernel", dtype).items():
        assert check_vec8(ins) == [], name


@pytest.mark.parametrize("dtype", ["half", "bf16"])
def test_gemv_contract(kernel_sass, dtype: str) -> None:
    for name, ins in _select(kernel_sass, "nvfp4_gemv_kernel", dtype).items():
        assert check_gemv(ins) == [], name


@pytest.mark.parametrize("dtype", ["half", "bf16"])
def test_fused_mma_contract(kernel_sass, dtype: str) -> None:
    chosen = _select(kernel_sass, "nvfp4_fused_mma_kernel", dtype)
    # 4 tile configurations x split-K sum (finalize, last block), and the wide block (8 warps) of
    # the two 128-row configurations, each for row-major and tile-contiguous weights
    # (nvfp4_launch_fused_tiled): the contract holds every instantiation a launch can take
    assert len(chosen) == 24, (f"one instantiation per M tile configuration, block width, split-K sum "
                               f"(finalize, last block) and weight layout, got {sorted(chosen)}")
    assert sum("ELi8ELb" in name for name in chosen) == 8, sorted(chosen)
    assert sum(name.endswith("ELb1EEEvPKhS3_S3_PKfPKtPtPfiiiiiiPiii") for name in chosen) == 12, sorted(chosen)
    for name, ins in chosen.items():
        problems = check_fused(ins)
        last_block, _tiled = re.search(r"ELi\d+ELb([01])ELb([01])E", name).groups()
        if last_block == "1":
            # the last-block sum is one called subroutine (kept out of the main loop's schedule)
            calls = [o for o in opcodes(ins) if o.startswith("CALL")]
            assert len(calls) == 1, name
            problems = [p for p in problems if not p.startswith("CALL")]
        assert problems == [], name


def mma_loop_spans(instructions: list[str]) -> list[tuple[int, int]]:
    """The loops of a function that issue tensor-core MMAs (HMMA), as (first, last) indexes into
    :func:`dump_sass`'s list: each backward branch, from its target through the branch.
    cuobjdump numbers sm_90 instructions 16 bytes apart from 0, so a target address / 16 is the
    instruction's index."""
    spans = []
    for i, ins in enumerate(instructions):
        branch = re.search(r"\bBRA\b.*?\b0x([0-9a-f]+)\b", ins)
        if branch is None:
            continue
        target = int(branch.group(1), 16)
        assert target % 16 == 0, ins
        if target // 16 <= i and any(o.startswith("HMMA") for o in opcodes(instructions[target // 16:i + 1])):
            spans.append((target // 16, i))
    return spans


def mma_loops(instructions: list[str]) -> list[list[str]]:
    """The bodies of :func:`mma_loop_spans`."""
    return [instructions[first:last + 1] for first, last in mma_loop_spans(instructions)]


def fused_step_prmts(rt: int, placed: bool) -> int:
    """PRMTs of one K step of a fused_mma thread, from the algorithm (mma_decode.cuh): 2 rows x RT
    row tiles x 4 words of 8 codes, each 4 table lookups and 4 byte interleaves (a row-major word 2
    more, to move its signs), and 2 rows x RT x 2 scale blocks' tables of 4 PRMTs each."""
    words, tables = 2 * rt * 4, 2 * rt * 2
    return words * (8 if placed else 10) + tables * 4


def fused_loop_problems(instructions: list[str], mt: int, rt: int, tiled: bool) -> list[str]:
    """Where the K loops of a fused_mma instantiation of MT activation and RT row tiles differ
    from the design's instruction counts (empty when they match). A step is 8 k16 MMAs for each
    activation and row tile. A registered (tile-contiguous) weight has two K loops: the table
    throughout (every scale byte in the table's range, scale_bytes_in_table) and the per-step
    range test with both decodes; a row-major weight only the second. The table loop issues the
    step's MMAs once, exactly fused_step_prmts PRMTs, 3 LOP3 a word (the magnitudes' mask and
    two sign XORs) and 2 FMUL a table (s = e4m3 * g and 1.5 s); a checked loop holds both
    decodes' MMAs and the table decode's PRMTs (the multiply decode has none)."""
    problems = []
    mmas = 8 * mt * rt
    loops = sorted(mma_loops(instructions), key=len)
    if len(loops) != (2 if tiled else 1):
        return [f"{len(loops)} K loops with MMAs, not {2 if tiled else 1}"]
    checked = opcodes(loops[-1])
    if _count(checked, "HMMA") != 2 * mmas:
        problems.append(f"checked loop: {_count(checked, 'HMMA')} HMMA, not {2 * mmas} (both decodes' MMAs)")
    if _count(checked, "PRMT") != fused_step_prmts(rt, placed=tiled):
        problems.append(f"checked loop: {_count(checked, 'PRMT')} PRMT, not {fused_step_prmts(rt, placed=tiled)}")
    if tiled:
        table = opcodes(loops[0])
        want = {"HMMA": mmas, "PRMT": fused_step_prmts(rt, placed=True), "LOP3": 3 * 8 * rt, "FMUL": 2 * 4 * rt}
        for op, n in want.items():
            if _count(table, op) != n:
                problems.append(f"table loop: {_count(table, op)} {op}, not {n}")
    return problems


@pytest.mark.parametrize("dtype", ["half", "bf16"])
def test_fused_mma_k_loops_decode_at_the_designs_instruction_counts(kernel_sass, dtype: str) -> None:
    """What the M <= 16 targets are held by is the decode's work per step (benchmarks/NOTES.md):
    every instantiation's K loops issue exactly the table decode's PRMTs, LOP3s and FMULs for its
    words and tables, and its MMAs once per step (a compiler or source change that adds decode
    instructions to the loop fails here, on the CPU, before any GPU times it)."""
    for name, ins in _select(kernel_sass, "nvfp4_fused_mma_kernel", dtype).items():
        mt, rt, _warps, _last_block, tiled = re.search(r"Li(\d+)ELi(\d+)ELi(\d+)ELb([01])ELb([01])E", name).groups()
        assert fused_loop_problems(ins, int(mt), int(rt), tiled == "1") == [], name


def test_the_loop_checker_reports_an_added_decode_instruction_or_a_lost_loop(kernel_sass) -> None:
    name, ins = next((name, ins) for name, ins in _select(kernel_sass, "nvfp4_fused_mma_kernel", "bf16").items()
                     if "Li1ELi1ELi4ELb1ELb1E" in name)
    assert fused_loop_problems(ins, 1, 1, True) == []
    # one of the table loop's LOP3s turned into a PRMT (in place: an insertion would move the
    # addresses that the branches name)
    first, last = min(mma_loop_spans(ins), key=lambda span: span[1] - span[0])
    lop = next(i for i in range(first, last + 1) if opcodes([ins[i]])[0].startswith("LOP3"))
    replaced = [*ins[:lop], "PRMT R0, R1, 0x5410, R2", *ins[lop + 1:]]
    problems = fused_loop_problems(replaced, 1, 1, True)
    assert any("table loop: 81 PRMT" in p for p in problems) and any("table loop: 23 LOP3" in p for p in problems)
    # as a row-major kernel (one loop expected) or at the wrong tile counts it fails as well
    assert fused_loop_problems(ins, 1, 1, False) == ["2 K loops with MMAs, not 1"]
    assert any("HMMA" in p for p in fused_loop_problems(ins, 2, 1, True))
    # a loop's backward branch turned into a forward one: no loop, reported
    no_loop = [re.sub(r"BRA 0x[0-9a-f]+", "BRA 0xfffff0", i) for i in ins]
    assert fused_loop_problems(no_loop, 1, 1, True) == ["0 K loops with MMAs, not 2"]


#: the ring of weight steps (fused_wgmma.cu's library_ring) of each (RELAYOUT, NACT) the library
#: launches: 4 at the 64-, 128- and 192-row tiles and 2 at the 256-row tile, on either layout, which
#: measured faster (benchmarks/NOTES.md, twenty-first, twenty-third and twenty-fourth sessions; the
#: 192-row tile's on an H100). test_cuda_build checks the library's own answer
#: (nvfp4_fused_wgmma_ring_steps).
LIBRARY_RINGS = {(relayout, nact): ring for relayout in "01"
                 for nact, ring in (("64", 4), ("128", 4), ("192", 4), ("256", 2))}
#: the activation stages (fused_wgmma.cu's library_stages) of each tile: four at 64 and 128 rows,
#: which measured 4-10% and 1-5% faster on an H100 (benchmarks/NOTES.md, twenty-ninth session),
#: three at 192 and 256 rows, where four do not fit
LIBRARY_STAGES = {"64": "4", "128": "4", "192": "3", "256": "3"}


#: (tiled, NACT) of the dev build's register-prefetch kernels (RING = 0, one block an SM, three
#: stages, nothing staged) that the contracts check beside the library's ringed ones
PREFETCH_DEV_KERNELS = ((True, 256), (False, 256), (True, 192), (True, 128))


def _wgmma_template(name: str) -> tuple[str, str, str, str, str, int]:
    """(RELAYOUT, NACT, MIN_BLOCKS, STAGES, STAGED, RING) of a fused_wgmma kernel's mangled name."""
    relayout, nact, minb, stages, staged, ring = re.search(
        r"fused_wgmma_kernelI\w+?Lb([01])ELi(\d+)ELi(\d+)ELi(\d+)ELb([01])ELi(\d+)E", name).groups()
    return relayout, nact, minb, stages, staged, int(ring)


def _wgmma_instantiations(kernel_sass, dtype: str) -> dict[tuple[str, str], list[str]]:
    """Every fused_wgmma instantiation of the library of one type, by (RELAYOUT, NACT): row-major
    and tile-contiguous weights, each at 64, 128, 192 and 256 activation rows (the launch takes the
    narrowest that holds M), one block an SM, the stages of :data:`LIBRARY_STAGES`, nothing staged,
    and the ring of :data:`LIBRARY_RINGS`."""
    chosen = _select(kernel_sass, "nvfp4_fused_wgmma_kernel", dtype)
    by = {}
    for name, ins in chosen.items():
        relayout, nact, minb, stages, staged, ring = _wgmma_template(name)
        want_template = ("1", LIBRARY_STAGES[nact], "0", LIBRARY_RINGS.get((relayout, nact), 0))
        assert (minb, stages, staged, ring) == want_template, name
        by[(relayout, nact)] = ins
    want = [(r, n) for r in "01" for n in ("64", "128", "192", "256")]
    assert sorted(by) == sorted(want) and len(chosen) == len(want), sorted(chosen)
    return by


def _count(ops: list[str], prefix: str) -> int:
    return sum(o.startswith(prefix) for o in ops)


def _decode_prmts(placed: bool) -> int:
    """PRMTs of one K step's decode per fused_wgmma thread: in fused_mma's K order a thread
    decodes what a fused_mma thread of one row tile does (two rows, two tables and four words a
    row), so it is :func:`fused_step_prmts` at RT = 1."""
    return fused_step_prmts(1, placed)


def test_ptxas_keeps_fused_wgmmas_asynchronous(library_cubins) -> None:
    """ptxas reports when it has to serialize a kernel's wgmmas (C7512 for too few registers,
    C7515 for other instructions writing their accumulators inside a pipeline stage); the kernel
    then waits after every wgmma. No library kernel may be built that way. The twenty-ninth
    session's trial of a warp-wide scale copy (benchmarks/NOTES.md) drew C7515 from an innocent
    rewrite of one shared-memory offset and ran its 64- to 256-row tiles 7-20% slower on an H100
    with the same bits, which no other contract here noticed."""
    report = build.ptxas_report(library_cubins["fused_wgmma"]).read_text()
    assert "Used" in report, "no ptxas report (-Xptxas -v)"
    serialized = [line for line in report.splitlines() if "wgmma.mma_async instructions are serialized" in line]
    assert serialized == [], serialized[:2]


@pytest.mark.parametrize("dtype", ["half", "bf16"])
def test_fused_wgmma_contract(kernel_sass, dtype: str) -> None:
    """Each instantiation: m64nNk16 HGMMAs with A from registers at its width N (two half steps of
    four), 16-byte weight loads (into registers, or with a ring through cp.async into the thread's
    ring and back), the table decode, no spill to local memory, no call."""
    for (relayout, nact), ins in _wgmma_instantiations(kernel_sass, dtype).items():
        assert check_wgmma(ins, int(nact), LIBRARY_RINGS.get((relayout, nact), 0)) == [], (relayout, nact)
        assert sum("HGMMA" in i for i in ins) == 8, "two half steps of four k16 MMAs each"


@pytest.mark.parametrize("dtype", ["half", "bf16"])
def test_fused_wgmma_decodes_two_tables_a_row_and_step_with_one_load_a_row(kernel_sass, dev_wgmma_sass,
                                                                           dtype: str) -> None:
    """What fused_mma's K order is for (benchmarks/NOTES.md, sixteenth session): each lane's 32 codes
    of a row and step lie in two scale blocks, so two decode tables a row and step where the natural
    order needed eight. The PRMT count is at least the algorithm's for two tables
    (:func:`_decode_prmts`) and short of what even four tables a row would add (2 rows x 2 more
    tables x 4 PRMTs x 2 halves = 32); the tile-contiguous copy's placed signs save 2 PRMTs a word.
    On either layout one 16-byte load of the lane's own bytes a row and step (the same count for
    both), its two scale bytes in one 16-bit load (told from the epilogue's 16-bit bias loads by not
    growing with the activation tile), no 8-byte scale load; a kernel with a ring of weight steps
    reads the same pieces back from its ring (one 16-byte and one 16-bit shared load a row) and has
    no global scale load. The narrower tiles are the same kernel with a narrower wgmma: the same
    PRMTs as the kernels that load alike within less than one decode table's four (which the
    scheduler may move) and as many 16-byte weight loads. The activation permutation moves 4-byte
    pairs: four 32-bit loads and a 16-byte store of a permuted chunk, or of zeros past M. Every
    library tile has a ring, so the register-prefetch kernels checked beside them are the dev
    build's (:data:`PREFETCH_DEV_KERNELS`)."""
    # (RELAYOUT, NACT, RING): the library's kernels, and the dev build's register-prefetch kernels
    # (no ring; one block an SM, three stages, nothing staged, as the library's) on either layout
    by = {(relayout, nact, LIBRARY_RINGS.get((relayout, nact), 0)): opcodes(ins)
          for (relayout, nact), ins in _wgmma_instantiations(kernel_sass, dtype).items()}
    tag = {"half": "6__half", "bf16": "13__nv_bfloat16"}[dtype]
    for tiled, nact in PREFETCH_DEV_KERNELS:
        found = [ins for name, ins in dev_wgmma_sass.items() if _mangled(tiled, nact, 1, 3, False, 0) in name
                 and tag in name]
        assert len(found) == 1, (tiled, nact)
        by[(str(int(tiled)), str(nact), 0)] = opcodes(found[0])
    for (relayout, nact, ring), ops in by.items():
        floor = _decode_prmts(placed=relayout == "1")
        assert floor <= _count(ops, "PRMT") < floor + 32, (relayout, nact, ring, _count(ops, "PRMT"), floor)
        if ring:  # the same 16-byte pieces, through the ring (ring_copy_problems)
            assert _count(ops, "LDS.128") == 2 and _count(ops, "LDG.E.128") == 0, (relayout, nact, ring)
        else:
            assert _count(ops, "LDG.E.128") == _count(by[("0", "256", 0)], "LDG.E.128") > 0, (relayout, nact)
        assert _count(ops, "LDG.E.64") == 0, (relayout, nact, ring)
        # as many PRMTs as the other kernels that load their weights the same way
        alike = [key for key in by if key[0] == relayout and bool(key[2]) == bool(ring)]
        assert max(abs(_count(ops, "PRMT") - _count(by[key], "PRMT")) for key in alike) < 4, (relayout, nact, ring)
    per_tile = _count(by[("0", "128", 4)], "LDG.E.U16") - _count(by[("0", "64", 4)], "LDG.E.U16")
    assert per_tile > 0
    # The epilogue's 16-bit bias loads grow with the activation tile, per_tile for every 64 rows;
    # the scale loads do not. What does not grow is, without a ring, at least one 16-bit scale load
    # for each of the thread's two rows in the prologue and in the loop, the same count in every such
    # kernel; a ring's kernel loads its scale words by cp.async (ring_copy_problems) and has only
    # the bias loads.
    scale_loads = {key: _count(ops, "LDG.E.U16") - int(key[1]) // 64 * per_tile for key, ops in by.items()}
    assert {n for key, n in scale_loads.items() if key[2]} == {0}, scale_loads
    unringed = {n for key, n in scale_loads.items() if not key[2]}
    assert len(unringed) == 1 and min(unringed) >= 2 * 2, scale_loads
    assert _count(by[("1", "256", 2)], "PRMT") < _count(by[("0", "256", 2)], "PRMT")
    assert _count(by[("1", "256", 0)], "PRMT") < _count(by[("0", "256", 0)], "PRMT")
    permute = [ins for name, ins in kernel_sass.items() if "nvfp4_wgmma_permute_act_kernel" in name]
    assert len(permute) == 1
    permute_ops = opcodes(permute[0])
    assert sum(o.startswith("LDG.E") and not o.startswith("LDG.E.128") for o in permute_ops) == 4
    assert _count(permute_ops, "STG.E.128") == 2


def test_the_dev_ablation_build_leaves_out_the_decode_the_mmas_and_the_later_weight_loads(
        kernel_sass, dev_wgmma_sass, tmp_path: Path) -> None:
    """scripts/ws_dev/ablate_dev.py times fused_wgmma with parts compiled out
    (-DNVFP4_WGMMA_ABLATE, built by ra_dev.py --ablations); its reading is only as good as the
    ablation. With every part out (7): no HGMMA, no decode (no E4M3 scale conversion, which the
    decode starts with and nothing else in the kernel does), and, without a ring, half the same
    kernel's 16-byte weight loads in the full dev build (only the first step's). (ptxas keeps an
    empty HGMMA, all operands zero registers, for the kept wgmma commit and wait: not an MMA.) The
    library's own build never defines the macro: its kernels keep the HGMMAs and the decode (the
    contract tests above)."""
    ablated_ins = _dev_cubin_sass(tmp_path, "NVFP4_WGMMA_ABLATE=7")
    ablated = {name: opcodes(ins) for name, ins in ablated_ins.items()}
    library = {name: opcodes(ins) for name, ins in kernel_sass.items() if "nvfp4_fused_wgmma_kernel" in name}
    # and the dev variants ablate_dev.py times beside the library's launch, in both types
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts" / "ws_dev"))
    try:
        from ablate_dev import RING_OF_4, RING_OF_6, TWO_BLOCKS
    finally:
        sys.path.pop(0)
    # all three are the ablation build's own: the ring of 4 at 64 rows keeps three activation
    # stages, where the library's tiled 64-row kernel has four (library_stages) since the
    # twenty-ninth session
    assert len(ablated) == len(library) + 6, sorted(ablated)
    for variant in (TWO_BLOCKS, RING_OF_4, RING_OF_6):
        assert sum(_mangled(*variant) in name for name in ablated) == 2, (variant, sorted(ablated))
    # the rings' copies: each thread's bytes by cp.async into shared memory, read back from there,
    # and no 16-byte global load of the weights
    for name, ops in ablated.items():
        if any(_mangled(*ring) in name for ring in (RING_OF_4, RING_OF_6)):
            assert _count(ops, "LDGSTS") >= 4 and _count(ops, "LDS.128") >= 2, name
            assert _count(ops, "LDG.E.128") == 0, name
    unringed = [name for name in ablated if _wgmma_template(name)[5] == 0]
    assert len(unringed) == 2 and all(_mangled(*TWO_BLOCKS) in name for name in unringed), unringed
    for name, ops in ablated.items():
        mmas = [i for i in ablated_ins[name] if "HGMMA" in i and "gdesc[URZ]" not in i]
        assert mmas == [], (name, mmas[:2])
        assert not any(".E4M3." in o for o in ops), name
        if name in unringed:  # a ring copies its bytes (ring_copy_problems) and ignores bit 4
            full = _count(opcodes(dev_wgmma_sass[name]), "LDG.E.128")
            assert full > 0 and 2 * _count(ops, "LDG.E.128") == full, (name, full)
    for name, ops in library.items():
        assert any(o.startswith("HGMMA") for o in ops) and any(".E4M3." in o for o in ops), name


def _by_unmangled_name(functions: dict[str, list[str]]) -> dict[str, list[str]]:
    """Functions keyed by their names without the translation unit's anonymous-namespace tag, so
    that two builds of fused_ra.cu with different defines can be compared kernel by kernel."""
    return {re.sub(r"_GLOBAL__N__\w+?_cu_[0-9a-f]+", "", name): ins for name, ins in functions.items()}


def test_the_activation_stream_ablation_copies_the_first_stages_only(dev_wgmma_sass, tmp_path: Path) -> None:
    """Bit 8 of NVFP4_WGMMA_ABLATE (twenty-sixth session: what holds the 64-row tile when neither
    its decode nor its MMAs do) leaves out the activation stream after the first stages: every
    kernel of that build issues its tensor copies (UTMALDG, two boxes a step) in the prologue only,
    half of what the same kernel of the full dev build issues, and keeps its HGMMAs and its decode.
    The library's build never defines the macro (its kernels are the contract tests' above)."""
    ablated_ins = _by_unmangled_name(_dev_cubin_sass(tmp_path, "NVFP4_WGMMA_ABLATE=8"))
    ablated = {name: opcodes(ins) for name, ins in ablated_ins.items()}
    full = {name: opcodes(ins) for name, ins in _by_unmangled_name(dev_wgmma_sass).items()}
    assert ablated and set(ablated) <= set(full), sorted(set(ablated) - set(full))
    for name, ops in ablated.items():
        copies, full_copies = _count(ops, "UTMALDG"), _count(full[name], "UTMALDG")
        assert copies == 2 and full_copies == 4, (name, copies, full_copies)
        assert _count(ops, "HGMMA") == _count(full[name], "HGMMA") > 0, name
        assert any(".E4M3." in o for o in ops), name


def test_the_epilogue_ablation_keeps_the_work_and_fences_off_only_the_stores(dev_wgmma_sass, tmp_path: Path) -> None:
    """Bits 16 and 32 of NVFP4_WGMMA_ABLATE (twenty-seventh session: what of the 64-row tile's
    skeleton is its split-K epilogue and its activation permutation) leave out the partial and
    output stores (behind a k == -1 test that no launch passes, so that the accumulators, and with
    them the decode and the MMAs, stay live), the finalize launch and the permutation launch. The
    measurement means something only if the kernel still does its work: every kernel of the bit-16
    build keeps the full dev build's HGMMAs and E4M3 scale conversions and its stores, fewer of them
    (the partial and output stores share one path). Bit 32 changes only the host's launch sequence,
    so the device code of the bit-48 build is the bit-16 build's, instruction for instruction."""
    full = _by_unmangled_name(dev_wgmma_sass)
    (tmp_path / "16").mkdir()
    no_epilogue = _by_unmangled_name(_dev_cubin_sass(tmp_path / "16", "NVFP4_WGMMA_ABLATE=16"))
    assert no_epilogue and set(no_epilogue) <= set(full), sorted(set(no_epilogue) - set(full))
    for name, ins in no_epilogue.items():
        ops, full_ops = opcodes(ins), opcodes(full[name])
        assert _count(ops, "HGMMA") == _count(full_ops, "HGMMA") > 0, name
        assert sum(".E4M3." in o for o in ops) == sum(".E4M3." in o for o in full_ops) > 0, name
        assert 0 < _count(ops, "STG") <= _count(full_ops, "STG"), name
    (tmp_path / "48").mkdir()
    no_permute = _by_unmangled_name(_dev_cubin_sass(tmp_path / "48", "NVFP4_WGMMA_ABLATE=48"))
    assert no_permute.keys() == no_epilogue.keys()
    for name, ins in no_permute.items():
        assert ins == no_epilogue[name], name


def test_wgmma_checker_reports_what_the_kernel_must_not_do(dev_wgmma_sass, bad_sass) -> None:
    text = " | ".join(check_wgmma(bad_sass["bad_gemv"]) + check_wgmma(bad_sass["bad_dequant"]))
    for expected in ("no warpgroup MMA", "no 16-byte global load", "local memory", "CALL",
                     "the table decode is missing"):
        assert expected in text, expected
    # a kernel with the register prefetch (no ring: the dev build's row-major 256-row tile), which
    # passes as it is
    ins = next(ins for name, ins in dev_wgmma_sass.items()
               if _mangled(False, 256, 1, 3, False, 0) in name and "13__nv_bfloat16" in name)
    assert check_wgmma(ins, 256) == []
    # the same kernel with its weights staged through shared memory, or an MMA reading A from it
    staged = [re.sub(r"^((?:@!?U?P\w+\s+)?)LDG\.E\.128", r"\1LDS.128", i) for i in ins]
    assert staged != ins and any("shared-memory load" in p for p in check_wgmma(staged, 256))
    by_desc = [re.sub(r"(HGMMA\S+ R\d+, )R\d+,", r"\1gdesc[UR4],", i) for i in ins]
    assert by_desc != ins and "an HGMMA that is not m64n256k16 with A from registers" in check_wgmma(by_desc, 256)


@pytest.mark.parametrize("dtype", ["half", "bf16"])
def test_splitk_finalize_contract(kernel_sass, dtype: str) -> None:
    """Each kernel file that sums split-K partials (GEMV, fused_mma, fused_wgmma) has its copy of
    the finalize kernel at both widths, each with its chunk of loads in flight and its 8- or 16-bit
    accesses (the launch takes width 4 where rows and addresses allow it)."""
    chosen = _select(kernel_sass, "nvfp4_splitk_finalize_kernel", dtype)
    for unit in ("gemv_cu", "fused_mma_cu", "fused_wgmma_cu"):
        for vec in (1, 4):
            found = [ins for name, ins in chosen.items() if f"_{unit}_" in name and f"Li{vec}EE" in name]
            assert len(found) == 1, (unit, vec, sorted(chosen))
            assert check_finalize(found[0], vec) == [], (unit, vec, check_finalize(found[0], vec))


def test_finalize_checker_reports_narrow_loads_and_split_accesses(kernel_sass) -> None:
    """The width-4 kernel with its partial loads narrowed to 4 bytes, or its 8-byte store split in
    two, is reported; the width-1 kernel passes only as width 1."""
    chosen = _select(kernel_sass, "nvfp4_splitk_finalize_kernel", "bf16")
    wide = next(ins for name, ins in chosen.items() if "Li4EE" in name)
    narrow = next(ins for name, ins in chosen.items() if "Li1EE" in name)
    assert check_finalize(wide, 4) == [] and check_finalize(narrow, 1) == []
    assert check_finalize(narrow, 4) != [] and check_finalize(wide, 1) != []
    narrowed = [re.sub(r"LDG\.E\.128", "LDG.E", i) for i in wide]
    assert any("partial loads" in p for p in check_finalize(narrowed, 4))
    split = [re.sub(r"STG\.E\.64 (\S+), (\S+)", r"STG.E \1, \2", i) for i in wide]
    split += [i for i in wide if i.startswith("STG")]
    assert any("output stores" in p for p in check_finalize(split, 4))


@pytest.mark.parametrize("dtype", ["half", "bf16"])
def test_scalar_contract(kernel_sass, dtype: str) -> None:
    for name, ins in _select(kernel_sass, "nvfp4_dequant_scalar_kernel", dtype).items():
        assert check_scalar(ins) == [], name


BAD_KERNELS = r"""
#include <cuda_fp16.h>
#include <stdint.h>
__device__ __noinline__ float slow_convert(unsigned c) { return c * 0.5f; }
// Stores bytes, loads bytes, spills an indexed array to local memory, calls a subroutine.
extern "C" __global__ void bad_dequant(const uint8_t* in, uint8_t* out, int n, int sel) {
  float table[64];
#pragma unroll 1
  for (int i = 0; i < 64; ++i) table[(i * sel) & 63] = slow_convert(in[i]);
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = (uint8_t)table[(in[i] + sel) & 63];
}
// A GEMV-shaped kernel on CUDA cores only: no tensor cores.
extern "C" __global__ void bad_gemv(const __half* a, const __half* w, float* y, int k) {
  float acc = 0.f;
  for (int i = 0; i < k; ++i) acc += __half2float(a[i]) * __half2float(w[threadIdx.x * k + i]);
  y[threadIdx.x] = acc;
}
"""


@pytest.fixture(scope="session")
def bad_sass(tmp_path_factory) -> dict[str, list[str]]:
    root = tmp_path_factory.mktemp("bad")
    src = root / "bad.cu"
    src.write_text(BAD_KERNELS)
    cubin = root / "bad.cubin"
    subprocess.run([build.find_nvcc(), "-O3", "-arch=sm_90", "-cubin", "-o", str(cubin), str(src)],
                   check=True, capture_output=True)
    return dump_sass(cubin)


def test_checkers_report_a_bad_dequant(bad_sass) -> None:
    problems = check_vec8(bad_sass["bad_dequant"])
    text = " | ".join(problems)
    assert "no 128-bit global store" in text
    assert "narrow global stores" in text
    assert "local memory" in text
    assert "CALL" in text
    assert check_scalar(bad_sass["bad_dequant"]) == ["no 16-bit global store (STG.E.U16)"]


def test_checkers_report_a_gemv_without_tensor_cores(bad_sass) -> None:
    problems = check_gemv(bad_sass["bad_gemv"])
    assert "no tensor-core HMMA instruction" in problems
    assert any("the table decode is missing" in p for p in problems), problems


def test_gemv_checker_flags_a_gemv_without_its_table_decode(kernel_sass) -> None:
    """The GEMV with its PRMTs turned into other instructions (a decode back to one multiply per
    value everywhere): the checker must name the missing table decode, and nothing else."""
    for name, ins in _select(kernel_sass, "nvfp4_gemv_kernel", "bf16").items():
        assert check_gemv(ins) == [], name
        regressed = [re.sub(r"^((?:@!?U?P\w+\s+)?)PRMT ", r"\1LOP3.LUT ", i) for i in ins]
        assert regressed != ins
        problems = check_gemv(regressed)
        assert len(problems) == 1 and "the table decode is missing" in problems[0], problems


def test_fused_checker_reports_what_the_fused_kernel_must_not_do(bad_sass) -> None:
    text = " | ".join(check_fused(bad_sass["bad_gemv"]) + check_fused(bad_sass["bad_dequant"]))
    for expected in ("no tensor-core HMMA instruction", "no 16-byte asynchronous copy", "no 128-bit shared load",
                     "local memory", "CALL", "direct global loads", "the table decode is missing"):
        assert expected in text, expected


def test_fused_checker_flags_a_kernel_without_its_table_decode(kernel_sass) -> None:
    """Strip the PRMTs from a real fused instantiation (a decode back to one multiply per value):
    the checker must say that the table decode is missing, and nothing else."""
    name, ins = next(iter(_select(kernel_sass, "nvfp4_fused_mma_kernel", "bf16").items()))
    assert check_fused(ins) == [] or "ELb1E" in name
    regressed = [re.sub(r"^((?:@!?U?P\w+\s+)?)PRMT ", r"\1LOP3.LUT ", i) for i in ins]
    assert regressed != ins
    problems = check_fused(regressed)
    assert any("the table decode is missing" in p for p in problems), problems


def test_vec8_checker_flags_byte_loads_of_packed_data(kernel_sass) -> None:
    """Turn every load of the real kernel into a byte load (a regression to per-byte packed
    reads): the checker must report the missing 32-bit packed load."""
    name, ins = next(iter(_select(kernel_sass, "nvfp4_dequant_vec8_kernel", "bf16").items()))
    assert check_vec8(ins) == []
    regressed = [re.sub(r"^((?:@!?U?P\w+\s+)?)LDG\.E((?:\.[A-Z]+)*) ", r"\1LDG.E.U8\2 ", i) for i in ins]
    assert regressed != ins
    assert check_vec8(regressed) == ["no 32-bit packed load (LDG.E)"]
