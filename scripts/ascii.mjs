/**
 * Rewrites a bundle esbuild wrote so that it is ASCII-only. V8 keeps a script's whole source
 * in the heap for as long as the script's functions live (lazy compilation reads it again),
 * one byte a character when every character is Latin-1, two bytes otherwise: one em dash in
 * a comment doubles it (dist/cli/main.js: 4.2 MB instead of 2.1 MB in serve's main thread).
 * esbuild already escapes non-ASCII characters in strings, templates and regular
 * expressions (its default charset), but leaves those in the comments it keeps. Each is
 * replaced by its \uXXXX escape, one per UTF-16 code unit: in a comment it is text, and in
 * a string, an untagged template or a regular expression it means the same character.
 */
import { readFileSync, writeFileSync } from 'node:fs';

/** Escapes the non-ASCII characters of `file` in place; returns how many there were. */
export function asciiOnly(file) {
  const text = readFileSync(file, 'utf8');
  let count = 0;
  const out = text.replace(/[\u0080-\uffff]/g, (c) => {
    count++;
    return `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`;
  });
  if (count > 0) writeFileSync(file, out);
  return count;
}
