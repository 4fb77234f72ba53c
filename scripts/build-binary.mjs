#!/usr/bin/env node
/**
 * `npm run build:binary`: one executable file, dist/receiver-<platform>-<arch>, made with
 * Node's single executable applications (node:sea) from the node running this script.
 *
 *   1. esbuild bundles src/binary/main.ts (the CLI) and src/binary/worker.ts (the SQLite
 *      ingest worker) into two CommonJS scripts: a single executable runs one CommonJS
 *      script, and the worker is started from its source (new Worker(code, { eval: true })).
 *      src/binary/drain-worker.ts (serve's drain thread) becomes an ES module instead (it
 *      awaits at its top level), started from a data: URL holding its source and named by
 *      a sourceURL comment in stack traces.
 *   2. The program, the workers' sources, better-sqlite3's addon, a stamp (version,
 *      commit, the addon's sha256) and the files of contrib/ go into a blob (node
 *      --experimental-sea-config).
 *   3. postject injects the blob into a copy of node; the copy is renamed into place.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { chmodSync, copyFileSync, existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { build } from 'esbuild';
import { asciiOnly } from './ascii.mjs';

const root = new URL('..', import.meta.url).pathname;
const require = createRequire(import.meta.url);
const started = Date.now();
const work = join(root, 'dist/binary-build');
const output = join(root, `dist/receiver-${process.platform}-${process.arch}`);
rmSync(work, { recursive: true, force: true });
mkdirSync(work, { recursive: true });

const bundle = (entry, outfile, format = 'cjs') =>
  build({
    entryPoints: [join(root, entry)],
    outfile: join(work, outfile),
    bundle: true,
    platform: 'node',
    format,
    // In the ES module, the bundled CommonJS packages' require() of node's own modules needs
    // a require (a data: URL module has no file of its own: one made from node's path).
    // Its stack frames would name the whole data: URL it is started from: named instead.
    ...(format === 'esm'
      ? {
          banner: { js: "import { createRequire as __receiverCreateRequire } from 'node:module';\nconst require = __receiverCreateRequire(process.execPath);" },
          footer: { js: `//# sourceURL=receiver:${outfile}` },
        }
      : {}),
    target: `node${process.versions.node.split('.')[0]}`,
    // pg's optional native driver: pg requires it only when asked for (pg.native), never here.
    external: ['pg-native'],
    // No import.meta in a CommonJS script. The two uses (finding dist/'s worker, a checkout's
    // package.json) are replaced by the worker source and the stamp before they can run.
    define: { 'import.meta.url': 'undefined' },
    logOverride: { 'empty-import-meta': 'silent' },
    // The bundled packages' licence notices stay in the file that is shipped.
    legalComments: 'eof',
    logLevel: 'warning',
  }).then(() => asciiOnly(join(work, outfile)));
await Promise.all([
  bundle('src/binary/main.ts', 'main.cjs'),
  bundle('src/binary/worker.ts', 'ingest-worker.cjs'),
  bundle('src/binary/drain-worker.ts', 'drain-worker.mjs', 'esm'),
]);

const addon = join(require.resolve('better-sqlite3/package.json'), '../build/Release/better_sqlite3.node');
// The executable carries this very node: the addon must load in it (npm ci built it for
// the node that ran npm ci; a node switched since then would fail only at the first open).
try {
  process.dlopen({ exports: {} }, addon);
} catch (e) {
  throw new Error(`${addon} does not load in this node (${process.version}): run npm ci with this node first\n${e.message}`);
}
const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8'));
let commit;
if (existsSync(join(root, '.git'))) {
  try {
    commit =
      execFileSync('git', ['describe', '--always', '--dirty', '--abbrev=12', '--exclude=*'], { cwd: root, stdio: ['ignore', 'pipe', 'ignore'] })
        .toString()
        .trim() || undefined;
  } catch {
    commit = undefined; // no git here: the version alone
  }
}
const stamp = {
  version: pkg.version,
  ...(commit === undefined ? {} : { commit }),
  addonSha256: createHash('sha256').update(readFileSync(addon)).digest('hex'),
};
writeFileSync(join(work, 'stamp.json'), JSON.stringify(stamp));
// contrib/ (the unit, the cron file, the wrapper, example configurations), for `receiver contrib`.
const contribDir = join(root, 'contrib');
writeFileSync(
  join(work, 'contrib.json'),
  JSON.stringify(
    Object.fromEntries(
      readdirSync(contribDir)
        .sort()
        .map((name) => [name, readFileSync(join(contribDir, name), 'utf8')]),
    ),
  ),
);

writeFileSync(
  join(work, 'sea-config.json'),
  JSON.stringify({
    main: join(work, 'main.cjs'),
    output: join(work, 'sea-prep.blob'),
    disableExperimentalSEAWarning: true,
    // V8's compiled code for main.cjs, made now: the program starts without compiling it.
    useCodeCache: true,
    assets: {
      'ingest-worker.js': join(work, 'ingest-worker.cjs'),
      'drain-worker.mjs': join(work, 'drain-worker.mjs'),
      'better_sqlite3.node': addon,
      'stamp.json': join(work, 'stamp.json'),
      'contrib.json': join(work, 'contrib.json'),
    },
  }),
);
// Node says where it wrote the blob (on stderr): this script's last line says what was built.
const blob = spawnSync(process.execPath, ['--experimental-sea-config', join(work, 'sea-config.json')], { cwd: work, encoding: 'utf8' });
const blobOutput = `${blob.stdout}${blob.stderr}`.split('\n').filter((line) => line !== '' && !line.startsWith('Wrote single executable preparation blob to '));
if (blob.status !== 0) throw new Error(`node --experimental-sea-config failed (exit ${blob.status}):\n${blobOutput.join('\n')}`);
for (const line of blobOutput) console.warn(line);

// Into a copy first: an interrupted build never leaves a half-injected file at `output`.
const tmp = `${output}.tmp`;
copyFileSync(process.execPath, tmp);
chmodSync(tmp, 0o755);
const { inject } = require('postject');
// postject edits the ELF file with LIEF, which warns, once per note segment it writes back,
// that the note has no name in the section-name table: "warning: Can't find string offset
// for section name '.note.100'" (nine lines on Linux x64; nodejs/postject#83). Node finds
// its blob through the program headers (the PT_NOTE segment), never by a section's name,
// and the test suite runs the file that comes out: those lines are dropped. Any other line
// postject writes is shown.
const LIEF_NOTE_NAME = /^warning: Can't find string offset for section name '\.note(\.\d+)?'$/;
const warn = console.warn;
console.warn = (...args) => {
  if (!LIEF_NOTE_NAME.test(args.join(' '))) warn(...args);
};
try {
  await inject(tmp, 'NODE_SEA_BLOB', readFileSync(join(work, 'sea-prep.blob')), {
    sentinelFuse: 'NODE_SEA_FUSE_fce680ab2cc467b6e072b8b5df1996b2',
    overwrite: true,
  });
} finally {
  console.warn = warn;
}
renameSync(tmp, output);
console.log(
  `${output}: ${pkg.version}${commit === undefined ? '' : ` (commit ${commit})`}, ${(readFileSync(output).length / 1e6).toFixed(1)} MB, built in ${((Date.now() - started) / 1000).toFixed(1)} s`,
);
