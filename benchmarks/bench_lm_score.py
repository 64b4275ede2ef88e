"""LM_SCORE benchmarks against the fake backend (a, b, c) and the company.db run (d).

    .venv/bin/python benchmarks/bench_lm_score.py            # a, b, c, and d on the fake
    .venv/bin/python benchmarks/bench_lm_score.py --company  # d only, the configured backend
    make bench-lm-score [LM_SCORE_ARGS=--fake]               # the same, writing a CSV

(a) an ensemble of 5 against a backend with 100 ms latency: concurrent vs sequential;
(b) LM_SCORE over N rows of distinct contents at concurrency 32 vs row by row (the naive UDF);
(c) a cached repeat of (b);
(d) the original project's 30-row company.db benchmark, six questions, scores to a CSV.
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from plugins.lm_score.cache import ScoreCache, m001_cache, m002_identity  # noqa: E402
from plugins.lm_score.config import ScoreConfig  # noqa: E402
from plugins.lm_score.scorer import Scorer  # noqa: E402
from plugins.lm_score.sql import ScoreFailures, SqlScorer  # noqa: E402
from tests.fake_backend import FakeBackend, Reply  # noqa: E402

COMPANY_DB = ROOT.parent / "shared" / "data" / "lm_score" / "company.db"
# The six questions of the original benchmark (../shared/data/README.md), 5 rows each.
QUESTIONS = [
    ("emails", "email, subject, body", 1, 5, "Is this email about billing or payments?"),
    ("emails", "email, subject, body", 6, 10, "Is this email about meetings or scheduling?"),
    (
        "invoices",
        "customer, product, amount, description",
        1,
        5,
        "Is this invoice for a software or technology product?",
    ),
    (
        "invoices",
        "customer, product, amount, description",
        6,
        10,
        "Is this invoice for a service or consulting engagement?",
    ),
    (
        "sales_leads",
        "client_name, description",
        1,
        5,
        "Is this lead interested in cloud or SaaS solutions?",
    ),
    (
        "sales_leads",
        "client_name, description",
        6,
        10,
        "Is this lead in healthcare or medical industry?",
    ),
]


def fake_config(backend: FakeBackend, **kw) -> ScoreConfig:
    base = dict(endpoint=backend.url, api_key="sk-bench", model="fake-model", retries=0)
    return ScoreConfig(**{**base, **kw})


# -- (a) ------------------------------------------------------------------------------------
def bench_ensemble(repeats: int) -> None:
    with FakeBackend() as backend:
        backend.latency = 0.1
        backend.handler = lambda body: Reply("7")

        async def timed(**kw) -> float:
            scorer = Scorer(fake_config(backend, ensemble=True, ensemble_size=5, **kw))
            await scorer.score(["warm up", "Is it?"])  # connection set-up is not measured
            start = time.perf_counter()
            for i in range(repeats):
                result = await scorer.score([f"content {i}", "Is it?"])
                assert result.members == 5
            await scorer.close()
            return (time.perf_counter() - start) / repeats

        sequential = asyncio.run(timed(sequential=True))
        concurrent = asyncio.run(timed(use_n=False))
        with_n = asyncio.run(timed(use_n=True))
    print(f"(a) ensemble of 5, backend latency 100 ms, mean of {repeats} scores")
    print(f"    sequential calls        {sequential * 1000:8.1f} ms")
    print(
        f"    5 concurrent calls      {concurrent * 1000:8.1f} ms   {sequential / concurrent:5.1f}x"
    )
    print(f"    one call with n=5       {with_n * 1000:8.1f} ms   {sequential / with_n:5.1f}x")


# -- (b) and (c) ----------------------------------------------------------------------------
def make_rows_db(path: Path, rows: int) -> None:
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT)")
    conn.executemany(
        "INSERT INTO notes (body) VALUES (?)",
        [(f"note {i}: invoice {i * 37}",) for i in range(rows)],
    )
    conn.commit()
    conn.close()


QUERY = "SELECT id FROM notes WHERE LM_SCORE(body, 'Is this note about an invoice?') >= 7"


class BackendProcess:
    """The fake backend in its own process, so its threads do not share our GIL (a real
    backend does not either). Answers every call with `reply` after `latency` seconds."""

    def __init__(self, latency: float, reply: str) -> None:
        import subprocess

        code = (
            "import sys; sys.path.insert(0, sys.argv[1]);"
            "from tests.fake_backend import FakeBackend, Reply;"
            "b = FakeBackend().start(); b.latency = float(sys.argv[2]);"
            "b.default = Reply(sys.argv[3]); print(b.url, flush=True); sys.stdin.read()"
        )
        self.proc = subprocess.Popen(
            [sys.executable, "-c", code, str(ROOT), str(latency), reply],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.url = self.proc.stdout.readline().strip()
        self.calls = 0

    def stop(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(10)


def bench_sql(rows: int, naive_rows: int, latency: float) -> None:
    backend = BackendProcess(latency, "8")
    try:
        _bench_sql(backend, rows, naive_rows, latency)
    finally:
        backend.stop()


def _bench_sql(backend, rows: int, naive_rows: int, latency: float) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "notes.db"
        make_rows_db(db, rows)

        # Row by row: the plain UDF, one backend call per row, on the first naive_rows rows.
        handle = SqlScorer(Scorer(fake_config(backend, concurrency=32)))
        conn = sqlite3.connect(db)
        conn.create_function("LM_SCORE", -1, handle.function)
        conn.execute("SELECT LM_SCORE('warm', 'up?')").fetchall()
        start = time.perf_counter()
        naive = conn.execute(
            QUERY.replace("FROM notes", "FROM notes WHERE id <= ?").replace(
                "WHERE LM_SCORE", "AND LM_SCORE"
            ),
            [naive_rows],
        ).fetchall()
        per_row = (time.perf_counter() - start) / naive_rows
        assert len(naive) == naive_rows
        handle.close()

        # Collect, then score concurrently (32 in flight), then run the query. The scores go
        # to a cache table as `lmd sql` stores them in the daemon's database.
        import sqlite_utils

        # Like the daemon's store: the scoring thread shares the connection.
        cache_db = sqlite_utils.Database(
            sqlite3.connect(Path(tmp) / "cache.db", check_same_thread=False, isolation_level=None)
        )
        cache_db.execute("PRAGMA journal_mode=WAL")
        cache_db.execute("PRAGMA synchronous=NORMAL")
        m001_cache(cache_db)
        m002_identity(cache_db)
        handle = SqlScorer(
            Scorer(fake_config(backend, concurrency=32, cache=True), cache=ScoreCache(cache_db))
        )
        handle.query(sqlite3.connect(db), "SELECT LM_SCORE('warm', 'up?')")
        start = time.perf_counter()
        cpu = time.process_time()
        _, found = handle.query(sqlite3.connect(db), QUERY)
        collected = time.perf_counter() - start
        cpu_per_call = (time.process_time() - cpu) / rows
        assert len(found) == rows and handle.scorer.calls == rows + 1
        handle.close()

        # (c) The same query again, every score in the cache, by a fresh scorer.
        again = SqlScorer(
            Scorer(fake_config(backend, concurrency=32, cache=True), cache=ScoreCache(cache_db))
        )
        start = time.perf_counter()
        _, cached_rows = again.query(sqlite3.connect(db), QUERY)
        cached = time.perf_counter() - start
        again.close()
        assert len(cached_rows) == rows and again.scorer.calls == 0

    naive_total = per_row * rows
    how = "measured" if naive_rows == rows else f"{naive_rows} rows measured, scaled"
    print(f"(b) LM_SCORE over {rows} distinct rows, backend latency {latency * 1000:g} ms")
    print(
        f"    row by row (naive UDF)  {naive_total:8.2f} s    ({how}: {per_row * 1000:.1f} ms/row)"
    )
    print(f"    collect + 32 at once    {collected:8.2f} s    {naive_total / collected:5.1f}x")
    print(f"    (client CPU {cpu_per_call * 1000:.1f} ms per call; the ratio is bounded by it)")
    print(f"(c) the same query, every score cached: {cached * 1000:.1f} ms (target < 100 ms)")


# -- (d) ------------------------------------------------------------------------------------
def fake_judge(body: dict) -> Reply:
    """A keyword judge standing in for a model in the demo run (not a real score)."""
    prompt = body["messages"][0]["content"].lower()
    question, content = prompt.split("question: ", 1)[1].split("\n", 1)
    content = content.split("provide a score")[0]
    words = {
        "billing": ("invoice", "payment", "billing", "refund", "charge"),
        "meetings": ("meeting", "schedule", "calendar", "call", "agenda"),
        "software": ("software", "license", "cloud", "platform", "saas", "hardware"),
        "service": ("consult", "service", "support", "training", "implementation"),
        "cloud": ("cloud", "saas", "platform", "subscription"),
        "healthcare": ("health", "medical", "hospital", "clinic", "patient", "pharma"),
    }
    topic = next(k for k in words if k in question)
    hits = sum(content.count(w) for w in words[topic])
    return Reply(str(min(10, 1 + 4 * hits)))


def bench_company(fake: bool, out: Path, home: Path | None) -> None:
    if not COMPANY_DB.exists():
        print(f"(d) skipped: {COMPANY_DB} is absent (it lives in ../shared beside the clone)")
        return
    backend = None
    if fake:
        backend = FakeBackend().start()
        backend.handler = fake_judge
        scorer = Scorer(fake_config(backend, concurrency=8))
        store = None
    else:
        from plugins.lm_score.sql import open_scorer

        dotenv = Path.cwd() / ".env"  # the original project's keys, as `lmd sql` reads them
        scorer, store = open_scorer(home, dotenv=dotenv if dotenv.is_file() else None)
    print(
        f"(d) company.db, 6 questions x 5 rows, backend {scorer.config.endpoint} "
        f"model {scorer.config.model}" + (" (the fake keyword judge)" if fake else "")
    )
    handle = SqlScorer(scorer, cache=False)
    handle.store = store
    conn = sqlite3.connect(f"file:{COMPANY_DB}?mode=ro", uri=True)
    results = []
    start = time.perf_counter()
    try:
        for table, columns, first, last, question in QUESTIONS:
            t0 = time.perf_counter()
            try:
                _, rows = handle.query(
                    conn,
                    f"SELECT id, LM_SCORE({columns}, ?) FROM {table} "
                    "WHERE id BETWEEN ? AND ? ORDER BY id",
                    [question, first, last],
                )
            except ScoreFailures as e:  # the rows, NULL where a score failed: counted below
                print(f"    {e.message}")
                rows = e.rows
            took = time.perf_counter() - t0
            for row_id, score in rows:
                results.append((table, row_id, question, score, round(took / len(rows), 3)))
            print(f"    {table:<12} {first:>2}-{last:<2} {[s for _, s in rows]}  {question}")
    finally:
        handle.close()
        if backend:
            backend.stop()
    total = time.perf_counter() - start
    with out.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["table", "id", "question", "score", "seconds_per_row"])
        w.writerows(results)
    failed = sum(1 for r in results if r[3] is None)
    print(f"    {len(results)} scores ({failed} failed) in {total:.2f} s -> {out}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--company", action="store_true", help="only (d), on the configured backend")
    p.add_argument("--fake", action="store_true", help="(d) against the fake keyword judge")
    p.add_argument("--csv", type=Path, default=None, help="where (d) writes its scores")
    p.add_argument("--home", type=Path, default=None, help="LMD_HOME with the settings to use")
    p.add_argument("--force", action="store_true", help="let --csv replace an existing file")
    p.add_argument("--rows", type=int, default=1000)
    p.add_argument("--naive-rows", type=int, default=50, help="rows timed row by row")
    p.add_argument("--latency", type=float, default=0.1, help="backend latency for (b)")
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    csv_out = args.csv or (Path("lm_score_company.csv") if args.company else None)
    if csv_out is not None and not args.force and csv_out.is_file() and csv_out.stat().st_size:
        # refuse before any scoring: a run on a real backend costs time and money
        p.exit(2, f"{csv_out} already exists; give another --csv, or add --force to replace it.\n")
    if args.company:
        bench_company(args.fake, args.csv or Path("lm_score_company.csv"), args.home)
        return
    bench_ensemble(args.repeats)
    bench_sql(args.rows, min(args.naive_rows, args.rows), args.latency)
    out = args.csv or Path(tempfile.gettempdir()) / "lm_score_company_fake.csv"
    bench_company(True, out, None)


if __name__ == "__main__":
    main()
