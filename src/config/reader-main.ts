/** The privileged reader's script (serve starts it with node, as root): see reader.ts. */
import { runPrivilegedReader } from './reader.js';

runPrivilegedReader(process.argv[2] ?? '{}');
