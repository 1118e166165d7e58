"""Data preparation against the tokenizer's own rate: MB/s of building examples (read, tokenize, pack, write the
table) with data.num_proc = 1 and 2, beside the Rust tokenizer's raw ``encode_batch`` on the same text with 1 and 2
threads; and the peak memory of a streamed preparation of 1× and 4× the corpus.

Every measurement runs in a fresh process (the tokenizer's thread count is fixed at its first use), the
configurations taking turns over the rounds; the corpus is WikiText-2's training text (the embedded corpus without
the shared data). Peak memory is the maximum resident set of the preparing process (its tokenizing threads
included: data.num_proc starts no process)."""

from __future__ import annotations

import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import REPO, WIKITEXT, save  # noqa: E402

READ_BATCH = 512


def corpus_lines() -> list[str]:
    if (WIKITEXT / "train.txt").exists():
        lines = (WIKITEXT / "train.txt").read_text(encoding="utf-8").splitlines()
    else:
        from degen_train.data.builtin_corpus import builtin_documents

        lines = builtin_documents() * 8
    return [line.strip() for line in lines if line.strip()]


def raw_encode(tokenizer_dir: str, corpus: str) -> dict:
    """The tokenizer alone: encode_batch over the corpus in batches, ids taken out as the preparation takes them."""
    from transformers import AutoTokenizer

    backend = AutoTokenizer.from_pretrained(tokenizer_dir).backend_tokenizer
    lines = Path(corpus).read_text(encoding="utf-8").splitlines()
    start = time.perf_counter()
    for i in range(0, len(lines), READ_BATCH):
        [encoding.ids for encoding in backend.encode_batch(lines[i : i + READ_BATCH], add_special_tokens=False)]
    return {"seconds": time.perf_counter() - start}


def prepare(tokenizer_dir: str, corpus: str, num_proc: int, data_format: str, streaming: bool) -> dict:
    """build_examples as a run calls it, into a fresh cache."""
    import datasets
    from transformers import AutoTokenizer

    from degen_train.data.examples import build_examples

    datasets.disable_progress_bars()
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    documents = datasets.load_dataset("text", data_files=[corpus], split="train", streaming=streaming)
    with tempfile.TemporaryDirectory() as cache:
        start = time.perf_counter()
        examples = build_examples(
            documents,
            tokenizer,
            data_format=data_format,
            block_size=128,
            seed=0,
            cache_root=Path(cache),
            identity="bench",
            num_proc=num_proc,
        )
        seconds = time.perf_counter() - start
    return {
        "seconds": seconds,
        "examples": len(examples),
        "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def in_fresh_process(kind: str, *args: object, threads: int = 1) -> dict:
    parallel = {"TOKENIZERS_PARALLELISM": "true" if threads > 1 else "false", "RAYON_NUM_THREADS": str(threads)}
    command = [sys.executable, str(Path(__file__).resolve()), kind, *map(str, args)]
    done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, **parallel}, check=False)
    if done.returncode:
        raise RuntimeError(f"{kind} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(rounds: int = 3) -> None:
    from omegaconf import OmegaConf

    from degen_train.data.tokenizer import train_byte_bpe, train_wordpiece

    lines = corpus_lines()
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        corpus = root / "corpus.txt"
        corpus.write_text("\n".join(lines) + "\n", encoding="utf-8")
        bigger = root / "corpus_x4.txt"
        bigger.write_text(corpus.read_text(encoding="utf-8") * 4, encoding="utf-8")
        megabytes = corpus.stat().st_size / 1e6
        settings = {"vocab_size": 30522, "min_frequency": 2, "lowercase": True, "max_documents": None}

        tokenizers = {"causal": root / "bpe", "mlm_nsp": root / "wordpiece"}
        train_byte_bpe(iter(lines), OmegaConf.create(settings)).save_pretrained(str(tokenizers["causal"]))
        train_wordpiece(iter(lines), OmegaConf.create(settings)).save_pretrained(str(tokenizers["mlm_nsp"]))
        configurations = {}
        for data_format in ("causal", "mlm_nsp"):
            for processes in (1, 2):
                configurations[(data_format, "raw", processes)] = (
                    lambda p=processes, f=data_format: in_fresh_process("raw", tokenizers[f], corpus, threads=p)
                )
                configurations[(data_format, "prepare", processes)] = (
                    lambda p=processes, f=data_format: in_fresh_process("prepare", tokenizers[f], corpus, p, f, 0)
                )
        seconds: dict[tuple, list[float]] = {name: [] for name in configurations}
        for _ in range(rounds):
            for name, measure in configurations.items():
                seconds[name].append(measure()["seconds"])
        memory = {
            f"{scale}×": in_fresh_process("prepare", tokenizers["causal"], path, 2, "causal", 1)
            for scale, path in ((1, corpus), (4, bigger))
        }
    rows = []
    for (data_format, kind, processes), values in seconds.items():
        if kind == "raw":
            continue
        median = statistics.median(values)
        raw = statistics.median(seconds[(data_format, "raw", processes)])
        rows.append({"format": data_format, "num_proc": processes, "seconds": round(median, 2),
                     "mb_per_s": round(megabytes / median, 2), "raw_mb_per_s": round(megabytes / raw, 2),
                     "vs_raw_at_same_cores": round(raw / median, 2)})  # fmt: skip
        print(
            f"{data_format:<8} num_proc={processes}: {median:6.2f} s, {megabytes / median:5.2f} MB/s; raw encode_batch "
            f"with {processes} thread(s) {megabytes / raw:5.2f} MB/s: ×{raw / median:.2f} of its rate"
        )
    for scale, measured in memory.items():
        print(
            f"streamed causal preparation of {scale} the corpus, num_proc=2: {measured['seconds']:.1f} s, peak "
            f"{measured['peak_mib']:.0f} MiB"
        )
    payload = {"corpus_mb": round(megabytes, 2), "rows": rows, "streamed_peak_memory": memory}
    save("data", {**payload, "method": __doc__.split("\n\n")[1].replace("\n", " ")})
    print(f"written to {REPO / 'bench' / 'results' / 'data.json'}")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "raw":
        print(json.dumps(raw_encode(sys.argv[2], sys.argv[3])))
    elif len(sys.argv) > 1 and sys.argv[1] == "prepare":
        tokenizer_dir, corpus, num_proc, data_format, streaming = sys.argv[2:7]
        print(json.dumps(prepare(tokenizer_dir, corpus, int(num_proc), data_format, streaming == "1")))
    else:
        main()
