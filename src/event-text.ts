/**
 * How parts of a stored event are put into words, the same for `events show` and the admin
 * pages: the body pretty-printed, the attempts counted across replays.
 */

const JSON_WS = new Set([' ', '\t', '\n', '\r']);

/**
 * JSON text indented by 2, or undefined when it is not JSON. Only the whitespace between
 * tokens changes: numbers keep every digit, keys their order and repeats (a parse and
 * stringify would round 12345678901234567890 and drop a repeated key).
 */
export function indentJson(text: string): string | undefined {
  try {
    JSON.parse(text);
  } catch {
    return undefined;
  }
  let out = '';
  let depth = 0;
  const newline = () => `\n${'  '.repeat(depth)}`;
  for (let i = 0; i < text.length; i++) {
    const c = text[i]!;
    if (c === '"') {
      let j = i + 1;
      while (text[j] !== '"') j += text[j] === '\\' ? 2 : 1;
      out += text.slice(i, j + 1);
      i = j;
    } else if (c === '{' || c === '[') {
      let j = i + 1;
      while (JSON_WS.has(text[j]!)) j++;
      if (text[j] === '}' || text[j] === ']') {
        out += c + text[j]!;
        i = j;
      } else {
        depth += 1;
        out += c + newline();
      }
    } else if (c === '}' || c === ']') {
      depth -= 1;
      out += newline() + c;
    } else if (c === ',') out += `,${newline()}`;
    else if (c === ':') out += ': ';
    else if (!JSON_WS.has(c)) out += c;
  }
  return out;
}

/** A content-type that says JSON: application/json, application/vnd.api+json, text/json. */
export const isJsonType = (headers: Record<string, string> | null) => /json/i.test(headers?.['content-type'] ?? '');

/** A stored body indented when its content-type says JSON and it is JSON; undefined otherwise (then it is shown as received). */
export function prettyBody(b: { headers: Record<string, string> | null; body: string | null; bodyEncoding: 'utf8' | 'base64' | null }): string | undefined {
  if (b.body === null || b.bodyEncoding !== 'utf8' || !isJsonType(b.headers)) return undefined;
  return indentJson(b.body);
}

/** An attempt as numbered across replays (see numberAttempts in src/json/events.ts). */
interface Numbered {
  attempt: number;
  number: number;
  replay: number;
}

/** The attempts line: the retry counter, and when there were replays, how many tries in all. */
export function attemptsText(attempts: number, log: readonly Numbered[]): string {
  const last = log.at(-1);
  if (last === undefined || last.replay === 0) return String(attempts);
  return `${attempts} since the last replay (${last.number} in all, ${last.replay} replay(s))`;
}

/** Said before the first attempt after a replay (undefined for any other attempt). */
export function replayMark(log: readonly Numbered[], i: number): string | undefined {
  const a = log[i]!;
  if (a.replay <= (log[i - 1]?.replay ?? 0)) return undefined;
  return `replay: the retry counter started again here (attempt ${a.attempt}); #n counts on`;
}
