/**
 * Where a JSON text stops being JSON, as a line and column an editor can jump to. Node 20
 * names a character offset for most syntax errors ("... in JSON at position 57") and none
 * for some ("Unexpected token '}', "..." is not valid JSON"); the offset is found by
 * scanning the text then.
 */

export interface JsonSyntaxError {
  line: number;
  column: number;
  /** What JSON.parse said, without the offset or the quoted text. */
  reason: string;
}

/** JSON.parse's error on `text`, located: 1-based line and column. */
export function locateJsonError(text: string, error: Error): JsonSyntaxError {
  const message = error.message;
  const at = /\bat position (\d+)/.exec(message);
  const offset = at !== null ? Number(at[1]) : firstErrorOffset(text);
  let reason = message.replace(/ at position \d+.*$/s, '').replace(/ in JSON$/, '');
  // "Unexpected token 'X', "<the text around it>" is not valid JSON": the quoted text may hold line breaks; the character is named instead.
  if (/^Unexpected token/.test(reason) && /is not valid JSON$/.test(reason)) reason = `Unexpected character ${JSON.stringify(text[offset] ?? '')}`;
  if (reason === 'Unexpected end of JSON input') reason = 'unexpected end of the file (a missing closing } or ], or a cut-off string)';
  return { ...lineAndColumn(text, offset), reason };
}

/** 1-based line and column of a character offset (a tab counts as one column). */
export function lineAndColumn(text: string, offset: number): { line: number; column: number } {
  const before = text.slice(0, Math.max(0, Math.min(offset, text.length)));
  const lines = before.split('\n');
  return { line: lines.length, column: (lines[lines.length - 1]?.length ?? 0) + 1 };
}

/**
 * The offset of the first character that is not valid JSON (RFC 8259), or the text's
 * length when it ends too early. A strict recursive descent; it only ever runs on a text
 * JSON.parse has already refused.
 */
export function firstErrorOffset(text: string): number {
  let i = 0;
  class Stop {
    constructor(readonly at: number) {}
  }
  const fail = (at = i): never => {
    throw new Stop(at);
  };
  const ws = () => {
    while (i < text.length && ' \t\n\r'.includes(text[i]!)) i += 1;
  };
  const literal = (word: string) => {
    for (const ch of word) {
      if (text[i] !== ch) fail();
      i += 1;
    }
  };
  const digits = () => {
    const start = i;
    while (i < text.length && text[i]! >= '0' && text[i]! <= '9') i += 1;
    if (i === start) fail();
  };
  const number = () => {
    if (text[i] === '-') i += 1;
    if (text[i] === '0') i += 1;
    else digits();
    if (text[i] === '.') {
      i += 1;
      digits();
    }
    if (text[i] === 'e' || text[i] === 'E') {
      i += 1;
      if (text[i] === '+' || text[i] === '-') i += 1;
      digits();
    }
  };
  const string = () => {
    i += 1; // the opening quote
    for (;;) {
      if (i >= text.length) fail();
      const ch = text[i]!;
      if (ch === '"') {
        i += 1;
        return;
      }
      if (ch < ' ') fail();
      if (ch === '\\') {
        i += 1;
        const esc = text[i];
        if (esc === 'u') {
          for (let k = 1; k <= 4; k += 1) if (!/[0-9a-fA-F]/.test(text[i + k] ?? '')) fail(i + k);
          i += 5;
        } else if (esc !== undefined && '"\\/bfnrt'.includes(esc)) i += 1;
        else fail();
      } else i += 1;
    }
  };
  const value = (): void => {
    ws();
    const ch = text[i];
    if (ch === '{') {
      i += 1;
      ws();
      if (text[i] === '}') {
        i += 1;
        return;
      }
      for (;;) {
        ws();
        if (text[i] !== '"') fail();
        string();
        ws();
        if (text[i] !== ':') fail();
        i += 1;
        value();
        ws();
        if (text[i] === ',') i += 1;
        else if (text[i] === '}') {
          i += 1;
          return;
        } else fail();
      }
    }
    if (ch === '[') {
      i += 1;
      ws();
      if (text[i] === ']') {
        i += 1;
        return;
      }
      for (;;) {
        value();
        ws();
        if (text[i] === ',') i += 1;
        else if (text[i] === ']') {
          i += 1;
          return;
        } else fail();
      }
    }
    if (ch === '"') return string();
    if (ch === 't') return literal('true');
    if (ch === 'f') return literal('false');
    if (ch === 'n') return literal('null');
    if (ch === '-' || (ch !== undefined && ch >= '0' && ch <= '9')) return number();
    fail();
  };
  try {
    value();
    ws();
    if (i < text.length) fail();
    return text.length;
  } catch (e) {
    if (e instanceof Stop) return e.at;
    throw e;
  }
}
