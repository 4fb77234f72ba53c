import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { REPO, tempDir } from './helpers.js';

/** The programs scripts/bundle.mjs writes (its ENTRIES), as dist/ holds them after `npm run build`. */
const BUNDLES = ['cli/main', 'drain/worker', 'store/sqlite/ingest-worker', 'effects/module-host-main', 'config/reader-main'];

const nonAscii = (text: Buffer) => text.filter((b) => b > 0x7f).length;

describe('the bundled programs', () => {
  let tmp: ReturnType<typeof tempDir>;
  beforeEach(() => {
    tmp = tempDir('receiver-bundle-');
  });
  afterEach(() => tmp.cleanup());

  // V8 keeps each program's source in memory one byte a character only when all of it is
  // Latin-1: one em dash in a bundled package's comment doubled serve's main thread's copy.
  it('are ASCII-only, so V8 keeps their source one byte a character', () => {
    for (const bundle of BUNDLES) expect(nonAscii(readFileSync(join(REPO, 'dist', `${bundle}.js`))), bundle).toBe(0);
  });

  it("scripts/ascii.mjs escapes a non-ASCII character in a comment, a string, a template and a regular expression, and the module's values stay the same", async () => {
    const file = join(tmp.dir, 'm.mjs');
    const source =
      '// a comment \u2014 with a dash\nexport const s = "caf\u00e9 \u{1F600}";\nexport const t = `\u2014${1}`;\nexport const r = /\u00e9+/.test("\u00e9\u00e9");\n';
    writeFileSync(file, source);
    const { asciiOnly } = (await import(pathToFileURL(join(REPO, 'scripts/ascii.mjs')).href)) as { asciiOnly: (file: string) => number };
    expect(asciiOnly(file)).toBe(8);
    expect(nonAscii(readFileSync(file))).toBe(0);
    const m = (await import(pathToFileURL(file).href)) as { s: string; t: string; r: boolean };
    expect(m).toMatchObject({ s: 'caf\u00e9 \u{1F600}', t: '\u20141', r: true });
  });
});
