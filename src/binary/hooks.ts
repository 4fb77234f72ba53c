/**
 * Imported first by each of the single executable's three scripts (the program, the ingest
 * worker, the drain worker): each thread that opens SQLite takes better-sqlite3's addon
 * from the executable.
 */
import { getAsset } from 'node:sea';
import { useNativeBinding } from '../store/sqlite/open.js';
import { addonDir, loadAddon } from './addon.js';

/** Written by scripts/build-binary.mjs beside the bundles. */
export interface BinaryStamp {
  version: string;
  commit?: string;
  /** sha256 of the better_sqlite3.node asset, hex. */
  addonSha256: string;
}

export const stamp = JSON.parse(getAsset('stamp.json', 'utf8')) as BinaryStamp;

let addon: object | undefined;
// Lazily: a PostgreSQL receiver, and --help, never write or load it.
useNativeBinding(() => (addon ??= loadAddon({ dir: addonDir(), sha256: stamp.addonSha256, bytes: () => new Uint8Array(getAsset('better_sqlite3.node')) })));
