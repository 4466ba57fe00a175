"""A deterministic, seeded corpus of Hermes-like sessions.

Sessions of many sizes (a long tail: most are short, a few are very long), with user,
assistant and tool rows, tool-call JSON on assistant rows, and text that mixes English
prose, code and CJK. A handful of marker terms are planted at known rates so every
search query the benchmark issues has hits.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

SIZES = {"quick": 5_000, "10k": 10_000, "100k": 100_000, "1m": 1_000_000}

EPOCH = 1_750_000_000.0  # June 2025, epoch seconds

SOURCES = ("cli", "telegram", "discord", "slack", "api", "cron")
MODELS = ("claude-sonnet-4", "gpt-4.1", "gemini-2.5-pro", "qwen3-coder", "llama-4")
TOOLS = ("terminal", "read_file", "write_file", "web_search", "browser", "patch")

WORDS = (
    "the a of to and in is it that for on with as this be are from at by an or not have "
    "session agent message model token context server client request response error file "
    "function value result cache queue worker thread lock write read update delete index "
    "query table column schema backup network latency memory process build deploy config "
    "python rust sqlite postgres docker kubernetes test pipeline branch commit review "
    "retry timeout checkpoint journal vacuum transaction cursor pool handler logger "
    "parser encoder decoder stream buffer socket header payload endpoint gateway"
).split()

CODE_SNIPPETS = (
    "def handler(event, ctx):\n    return {'status': 200, 'body': json.dumps(event)}\n",
    "for i in range(10):\n    print(i * i)\n",
    "SELECT id, title FROM sessions WHERE started_at > ? ORDER BY started_at DESC;\n",
    'fn main() {\n    let v: Vec<u32> = (0..10).collect();\n    println!("{:?}", v);\n}\n',
    "const res = await fetch(url, { method: 'POST', body: JSON.stringify(data) });\n",
    "git rebase -i HEAD~3 && git push --force-with-lease origin feature/x\n",
    "class Cache:\n    def __init__(self):\n        self._d = {}\n",
    "docker run --rm -v $PWD:/src -w /src python:3.12 pytest -q\n",
)

CJK_SENTENCES = (
    "数据库连接池已经满了，请稍后重试。",
    "我们需要把这个函数重构一下，让它更容易测试。",
    "请帮我总结一下今天的会议记录。",
    "这个错误是因为配置文件里缺少了一个字段。",
    "服务器在凌晨三点重启了，日志里有超时的记录。",
    "データベースのバックアップを取ってください。",
    "검색 결과가 비어 있습니다. 다른 키워드를 시도하세요.",
    "这个项目使用了全文检索和三元组索引。",
)

# Planted terms, one per search benchmark query (see QUERIES).
PLANTED_WORD = "zephyrine"
PLANTED_PHRASE = "connection pool exhausted"
PLANTED_PREFIX_WORDS = ("migration", "migrated", "migrating", "migrator")
PLANTED_OR = ("kafkaesque", "redisson")
PLANTED_CJK2 = "数据"  # 2 characters: only a LIKE scan can find it
PLANTED_CJK3 = "数据库"  # 3+: the trigram index answers
# Literals (punctuation inside a term), planted without another draw from the generator
# so every other row of the corpus stays what it was.
PLANTED_LITERALS = ("don't", "99.5%", "ops@zephyr.io", "~/.config/zephyr.toml")

#: name -> the query as a user would type it
QUERIES: dict[str, str] = {
    "word": PLANTED_WORD,
    "phrase": f'"{PLANTED_PHRASE}"',
    "prefix": "migrat*",
    "or": f"{PLANTED_OR[0]} OR {PLANTED_OR[1]}",
    # a word in as many rows as the frequent literal below (the same code snippets):
    # what a literal's cost is compared with
    "word frequent": "rebase",
    "cjk2": PLANTED_CJK2,
    "cjk3": PLANTED_CJK3,
    # literals: planted (rare), from the code snippets (frequent), mixed with a word,
    # shorter than a trigram (the word-boundary route), of common letters. Not here: a
    # literal of punctuation only (`&&`; `-->` on PostgreSQL), answered by a scan (docs/search.md)
    "literal contraction": PLANTED_LITERALS[0],
    "literal percent": PLANTED_LITERALS[1],
    "literal e-mail": PLANTED_LITERALS[2],
    "literal path": PLANTED_LITERALS[3],
    "literal flag": "--force-with-lease",
    "literal + word": "HEAD~3 rebase",
    "literal short": "-i",
    # a literal whose letters are in a quarter of the rows and whose punctuation, which
    # pg_trgm ignores, is what makes it rarer (0.8 % of the rows)
    "literal common letters": "the.",
}


#: name -> a query that finds nothing in the corpus (issue 41): what people type when they
#: mistype. Each matches no word, so the word index answers nothing and the query is asked
#: again by substring (the zero-hit retry, bounded by limits.RETRY_CHECKS); a literal
#: goes through the literal tier's windows first.
ZERO_HIT_QUERIES: dict[str, str] = {
    # extends a frequent word: every trigram but one is `postgres`'s
    "zero-hit extends a word": "postgress",
    # two letters swapped inside a frequent word
    "zero-hit inside a word": "kubernetse",
    "zero-hit random": "zqxvjwkp",
    # the planted path with another extension
    "zero-hit literal": "~/.config/zephyr.yaml",
    # near misses of the planted literals and the code snippets' ones
    "zero-hit ten literals": " OR ".join(
        (
            "~/.config/zephyr.yaml",
            "ops@zephyr.com",
            "99.6%",
            "--force-with-leash",
            "HEAD~4",
            "src/module_9999.py",
            "v1.2.3-rc9",
            "/etc/zephyr.conf",
            "user@example.org",
            "doesn't",
        )
    ),
}


def all_queries() -> dict[str, str]:
    """Every search row: QUERIES, then ZERO_HIT_QUERIES."""
    return {**QUERIES, **ZERO_HIT_QUERIES}


def row_label(name: str, query: str) -> str:
    """A search row's name in the tables: its name and query, a long query cut short."""
    shown = query if len(query) <= 40 else query[:37] + "..."
    return f"search {name}: {shown}"


def check_hits(name: str, query: str, hits: list[Any]) -> None:
    """Exit when a search row's query finds what the corpus should not give it: nothing
    for a row of QUERIES, something for one of ZERO_HIT_QUERIES."""
    if name in ZERO_HIT_QUERIES and hits:
        raise SystemExit(f"search {name!r} ({query!r}) found {len(hits)} hits: corpus bug")
    if name not in ZERO_HIT_QUERIES and not hits:
        raise SystemExit(f"search {name!r} ({query!r}) found nothing: corpus bug")


@dataclass
class SessionSpec:
    id: str
    source: str
    model: str
    started_at: float
    cwd: str
    messages: list[dict[str, Any]] = field(default_factory=list)


class _Text:
    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def english(self, lo: int, hi: int) -> str:
        rng = self.rng
        words = [rng.choice(WORDS) for _ in range(rng.randint(lo, hi))]
        # planted terms at fixed rates, so hits scale with the corpus
        roll = rng.random()
        if roll < 0.004:
            words.insert(rng.randrange(len(words) + 1), PLANTED_WORD)
        elif roll < 0.007:
            words.insert(rng.randrange(len(words) + 1), PLANTED_PHRASE)
        elif roll < 0.015:
            words.insert(rng.randrange(len(words) + 1), rng.choice(PLANTED_PREFIX_WORDS))
        elif roll < 0.019:
            words.insert(rng.randrange(len(words) + 1), rng.choice(PLANTED_OR))
        elif roll < 0.027:
            words.append(PLANTED_LITERALS[int(roll * 100_000) % len(PLANTED_LITERALS)])
        text = " ".join(words)
        return text[:1].upper() + text[1:] + "."

    def mixed(self, lo: int, hi: int) -> str:
        rng = self.rng
        parts = [self.english(lo, hi)]
        roll = rng.random()
        if roll < 0.25:
            parts.append("```\n" + rng.choice(CODE_SNIPPETS) + "```")
        if rng.random() < 0.12:
            parts.append(rng.choice(CJK_SENTENCES))
        return "\n\n".join(parts)


def _tool_call(rng: random.Random, n: int) -> dict[str, Any]:
    tool = rng.choice(TOOLS)
    args: dict[str, Any]
    if tool == "terminal":
        args = {"command": rng.choice(CODE_SNIPPETS).splitlines()[0], "timeout": 60}
    elif tool in ("read_file", "write_file", "patch"):
        args = {"path": f"src/module_{rng.randint(1, 400)}.py", "offset": rng.randint(0, 900)}
    else:
        args = {"query": " ".join(rng.choice(WORDS) for _ in range(4))}
    return {
        "id": f"call_{n:08x}",
        "type": "function",
        "function": {"name": tool, "arguments": json.dumps(args)},
    }


def _session_length(rng: random.Random) -> int:
    roll = rng.random()
    if roll < 0.45:
        return rng.randint(2, 12)
    if roll < 0.80:
        return rng.randint(13, 60)
    if roll < 0.97:
        return rng.randint(61, 300)
    return rng.randint(301, 2000)


def generate(total_messages: int, seed: int = 23) -> list[SessionSpec]:
    """Sessions whose messages add up to `total_messages`, the same for the same seed."""
    rng = random.Random(seed)
    text = _Text(rng)
    sessions: list[SessionSpec] = []
    produced = 0
    call_no = 0
    clock = EPOCH
    while produced < total_messages:
        length = min(_session_length(rng), total_messages - produced)
        clock += rng.uniform(30, 4 * 3600)
        n = len(sessions)
        spec = SessionSpec(
            id=f"{20250601 + n // 500:08d}_{n:07d}_{rng.getrandbits(24):06x}",
            source=rng.choice(SOURCES),
            model=rng.choice(MODELS),
            started_at=clock,
            cwd=f"/home/dev/project{rng.randint(1, 30)}",
        )
        ts = clock
        pending: list[dict[str, Any]] = []  # tool calls awaiting their results
        for _ in range(length):
            ts += rng.uniform(0.5, 90)
            if pending:
                call = pending.pop(0)
                body = rng.choice(CODE_SNIPPETS) if rng.random() < 0.5 else text.english(20, 200)
                spec.messages.append(
                    {
                        "role": "tool",
                        "content": body,
                        "tool_call_id": call["id"],
                        "tool_name": call["function"]["name"],
                        "timestamp": ts,
                    }
                )
            elif not spec.messages or spec.messages[-1]["role"] != "user":
                spec.messages.append(
                    {"role": "user", "content": text.mixed(4, 40), "timestamp": ts}
                )
            else:
                msg: dict[str, Any] = {
                    "role": "assistant",
                    "content": text.mixed(10, 120),
                    "timestamp": ts,
                    "finish_reason": "stop",
                    "token_count": rng.randint(20, 2000),
                }
                if rng.random() < 0.45:
                    calls = []
                    for _ in range(rng.choice((1, 1, 1, 2, 3))):
                        call_no += 1
                        calls.append(_tool_call(rng, call_no))
                    msg["tool_calls"] = calls
                    msg["finish_reason"] = "tool_calls"
                    pending.extend(calls)
                spec.messages.append(msg)
        produced += len(spec.messages)
        sessions.append(spec)
    return sessions


def fresh_messages(seed: int, count: int, start_ts: float) -> Iterator[dict[str, Any]]:
    """New messages for the append benchmarks (the same sequence for floor and store)."""
    rng = random.Random(seed)
    text = _Text(rng)
    ts = start_ts
    for n in range(count):
        ts += 1.0
        if n % 3 == 2:
            call = _tool_call(rng, 10_000_000 + n)
            yield {
                "role": "assistant",
                "content": text.mixed(10, 80),
                "tool_calls": [call],
                "timestamp": ts,
            }
        else:
            yield {
                "role": "user" if n % 3 == 0 else "tool",
                "content": text.mixed(5, 60),
                "timestamp": ts,
            }


def message_count(sessions: list[SessionSpec]) -> int:
    return sum(len(s.messages) for s in sessions)
