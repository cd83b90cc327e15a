import { HookVerifyError } from "./errors.js";

/**
 * checkBodyNamespace requires body to be a JSON object whose data.namespace
 * is signed. Both keys must have exactly that spelling and appear once: a
 * JSON reader that matches keys without regard to case, or keeps the first
 * of two (JSON.parse keeps the last), would otherwise read another value
 * than the one checked.
 */
export function checkBodyNamespace(body: Uint8Array, signed: string, headerName: string): void {
  let got: string;
  try {
    got = bodyNamespace(new TextDecoder().decode(body));
  } catch (err) {
    throw new HookVerifyError("ErrNamespace", `body: ${(err as Error).message}`);
  }
  if (got !== signed) throw new HookVerifyError("ErrNamespace", `body's data.namespace is not the signed ${headerName}`);
}

// foldEq is Go's strings.EqualFold for the ASCII names compared here: "ſ"
// (U+017F) and "K" (U+212A) fold to s and k.
const fold = (s: string) => s.toLowerCase().replace(/\u017f/g, "s").replace(/\u212a/g, "k");

function bodyNamespace(text: string): string {
  try {
    JSON.parse(text); // the walk below then needs no error handling of its own
  } catch {
    throw new Error("not a JSON object");
  }
  const s = new Scanner(text);
  let ns: string | undefined;
  let seenData = false;
  s.members((key) => {
    if (fold(key) !== "data") return s.skipValue();
    if (key !== "data" || seenData) throw new Error('"data" appears twice or in another case');
    seenData = true;
    let seenNS = false;
    s.members((key) => {
      if (fold(key) !== "namespace") return s.skipValue();
      if (key !== "namespace" || seenNS) throw new Error('data."namespace" appears twice or in another case');
      seenNS = true;
      s.ws();
      if (s.peek() !== '"') throw new Error("data.namespace is not a string");
      ns = s.string();
    });
  });
  if (!ns) throw new Error("no data.namespace");
  s.ws();
  if (!s.done()) throw new Error("data after the JSON object");
  return ns;
}

/** Scanner walks JSON text already known to be valid. */
class Scanner {
  #i = 0;
  constructor(readonly text: string) {}

  done(): boolean {
    return this.#i >= this.text.length;
  }
  peek(): string {
    return this.text[this.#i] ?? "";
  }
  ws(): void {
    while (/[ \t\n\r]/.test(this.peek()) && !this.done()) this.#i++;
  }
  /** members reads one object, calling member with each key; member reads the key's value. */
  members(member: (key: string) => void): void {
    this.ws();
    if (this.peek() !== "{") throw new Error("not a JSON object");
    this.#i++;
    for (;;) {
      this.ws();
      if (this.peek() === "}") {
        this.#i++;
        return;
      }
      if (this.peek() === ",") {
        this.#i++;
        this.ws();
      }
      const key = this.string();
      this.ws();
      this.#i++; // ':'
      member(key);
    }
  }
  string(): string {
    const start = this.#i;
    this.#i++; // '"'
    while (this.peek() !== '"') this.#i += this.peek() === "\\" ? 2 : 1;
    this.#i++;
    return JSON.parse(this.text.slice(start, this.#i)) as string;
  }
  skipValue(): void {
    this.ws();
    const c = this.peek();
    if (c === '"') {
      this.string();
      return;
    }
    if (c === "{" || c === "[") {
      let depth = 0;
      do {
        const d = this.peek();
        if (d === '"') {
          this.string();
          continue;
        }
        if (d === "{" || d === "[") depth++;
        else if (d === "}" || d === "]") depth--;
        this.#i++;
      } while (depth > 0);
      return;
    }
    while (!this.done() && !/[,}\] \t\n\r]/.test(this.peek())) this.#i++; // a number, true, false or null
  }
}
