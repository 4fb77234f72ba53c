import js from '@eslint/js';
import tseslint from 'typescript-eslint';

export default tseslint.config(
  { ignores: ['dist/**', 'node_modules/**', 'coverage/**'] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    languageOptions: {
      globals: {
        process: 'readonly',
        console: 'readonly',
        Buffer: 'readonly',
        setTimeout: 'readonly',
        clearTimeout: 'readonly',
        setImmediate: 'readonly',
        setInterval: 'readonly',
        clearInterval: 'readonly',
        URL: 'readonly',
      },
    },
    rules: {
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
      'no-console': 'off',
    },
  },
  // Layers point one way. src/cli is the top (only src/binary starts it besides bin/) and
  // reaches the HTTP side only through src/server.ts; what the CLI and the admin pages both
  // show lives below both (src/json/, src/time.ts).
  {
    files: ['src/**/*.ts', 'src/**/*.tsx'],
    ignores: ['src/cli/**', 'src/binary/**'],
    rules: {
      'no-restricted-imports': [
        'error',
        { patterns: [{ group: ['**/cli/*'], message: 'src/cli is the top layer: move what both sides need below both (src/json/, src/time.ts).' }] },
      ],
    },
  },
  {
    files: ['src/cli/**/*.ts'],
    rules: {
      'no-restricted-imports': [
        'error',
        {
          patterns: [
            { group: ['**/http/*', '**/http/**'], message: 'src/cli reaches the HTTP side only through src/server.ts; move what both need below both.' },
          ],
        },
      ],
    },
  },
  // Rules that need the types: a promise nobody awaits can lose a commit's error or an
  // effect's result; an unhandled case of the vocabulary is a status nobody settles.
  {
    files: ['src/**/*.ts', 'src/**/*.tsx', 'test/**/*.ts', 'test/**/*.tsx'],
    languageOptions: { parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname } },
    rules: {
      '@typescript-eslint/no-floating-promises': 'error',
      '@typescript-eslint/no-misused-promises': 'error',
      '@typescript-eslint/await-thenable': 'error',
      '@typescript-eslint/no-unnecessary-type-assertion': 'error',
      '@typescript-eslint/switch-exhaustiveness-check': 'error',
    },
  },
);
