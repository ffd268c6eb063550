/**
 * Lint: no input used as a key of a plain object (issue 19). `record[key]` with a key that is any
 * string reaches the prototype: `constructor`, `valueOf` or `__proto__` read a function or
 * pollute, where a Map or an own-property check would answer "absent". Biome has no rule for it
 * (it needs types), so this script asks the TypeScript checker about every element access in the
 * services' and packages' src:
 *
 *   flagged: `o[k]` where `k` is of type string (not a union of literals) and `o` is a plain object
 *   with a string index signature (`Record<string, T>`, `{ [k: string]: T }`), not an array, Map or
 *   typed array;
 *   allowed: the access guarded by `Object.hasOwn(o, k)` (or `hasOwnProperty.call(o, k)`), the
 *   same object and key, in the enclosing condition or an earlier statement of the function; `k`
 *   iterated from `Object.keys(o)` or `Object.entries(o)`; a function that makes an object with
 *   `Object.create(null)`; or a line marked `// own-key: <why the key cannot be a prototype member>`.
 *   Elsewhere, read with `ownValue(o, k)` and write with `setOwn(o, k, v)` (@onto/shared).
 *
 * Run by `pnpm run lint`; exits 1 listing each finding as file:line. There is no baseline: the
 * accesses found when the rule came in were each fixed or marked.
 */
import { relative, resolve } from 'node:path';
import ts from 'typescript';

const root = resolve(import.meta.dirname, '..');
const config = ts.getParsedCommandLineOfConfigFile(
  resolve(root, 'tsconfig.test.json'),
  {},
  {
    ...ts.sys,
    onUnRecoverableConfigFileDiagnostic: (d) => {
      throw new Error(ts.flattenDiagnosticMessageText(d.messageText, '\n'));
    },
  },
);
if (!config) throw new Error('cannot read tsconfig.test.json');
// The services' and packages' own code (their src), typed as the tests see it.
const sources = ts.sys
  .readDirectory(
    root,
    ['.ts'],
    ['**/node_modules', '**/dist', '**/test'],
    ['services/*/src/**/*', 'packages/*/src/**/*'],
  )
  .filter((f) => !f.endsWith('.d.ts'));
const program = ts.createProgram({ rootNames: sources, options: { ...config.options, noEmit: true } });
const checker = program.getTypeChecker();
const inScope = (file: string) => /\/(services|packages)\/[^/]+\/src\//.test(file) && !file.includes('node_modules');

function isStringKey(type: ts.Type): boolean {
  if (type.isUnion()) return type.types.some(isStringKey);
  return (type.flags & (ts.TypeFlags.String | ts.TypeFlags.TemplateLiteral | ts.TypeFlags.StringMapping)) !== 0;
}

function isPlainRecord(type: ts.Type): boolean {
  const nonNullable = checker.getNonNullableType(type);
  if (nonNullable.isUnion()) return nonNullable.types.some(isPlainRecord);
  if (checker.isArrayType(nonNullable) || checker.isTupleType(nonNullable)) return false;
  if (!checker.getIndexInfoOfType(nonNullable, ts.IndexKind.String)) return false;
  const name = nonNullable.getSymbol()?.getName() ?? '';
  return !/^(Map|Set|WeakMap|.*Array|Buffer|Headers|URLSearchParams|ProcessEnv)$/.test(name);
}

/**
 * `for (const k of Object.keys(o))` or `for (const [k] of Object.entries(o))`, sorted or not: the
 * key is own in `o`.
 */
function ownKeyOf(key: ts.Expression, object: ts.Expression, source: ts.SourceFile): boolean {
  if (!ts.isIdentifier(key)) return false;
  const declaration = checker.getSymbolAtLocation(key)?.valueDeclaration;
  if (!declaration) return false;
  let loop: ts.Node = declaration;
  while (loop.parent && !ts.isForOfStatement(loop) && !ts.isStatement(loop)) loop = loop.parent;
  if (!ts.isForOfStatement(loop) || !ts.isCallExpression(loop.expression)) return false;
  let call = loop.expression;
  // `Object.keys(o).sort()`: the same keys in another order.
  if (
    ts.isPropertyAccessExpression(call.expression) &&
    call.expression.name.text === 'sort' &&
    ts.isCallExpression(call.expression.expression)
  ) {
    call = call.expression.expression;
  }
  const callee = call.expression.getText(source);
  const iterated = call.arguments[0]?.getText(source);
  return (callee === 'Object.keys' || callee === 'Object.entries') && iterated === object.getText(source);
}

/**
 * Whether the source text from the function's start up to the access checks this key on this
 * object (`Object.hasOwn(o, k)`, white space aside), or the function makes a null-prototype object.
 * Any check of any key did before: checkObject's Object.hasOwn of one name hid reads of others.
 */
function guarded(node: ts.ElementAccessExpression, source: ts.SourceFile): boolean {
  const line = source.getLineAndCharacterOfPosition(node.getStart(source)).line;
  const lines = source.text.split('\n');
  if (/\/\/ own-key: \S/.test(lines[line] ?? '') || /\/\/ own-key: \S/.test(lines[line - 1] ?? '')) return true;
  let scope: ts.Node = node;
  while (scope.parent && !ts.isFunctionLike(scope) && !ts.isSourceFile(scope)) scope = scope.parent;
  const squeeze = (text: string) => text.replace(/\s+/g, '');
  const before = squeeze(source.text.slice(scope.getStart(source), node.getStart(source)));
  if (before.includes('Object.create(null)')) return true;
  const object = squeeze(node.expression.getText(source)).replace(/\?$/, '');
  const key = squeeze(node.argumentExpression.getText(source));
  return [`Object.hasOwn(${object},${key})`, `hasOwnProperty.call(${object},${key})`].some((g) => before.includes(g));
}

const findings: string[] = [];
for (const source of program.getSourceFiles()) {
  if (!inScope(source.fileName)) continue;
  const visit = (node: ts.Node) => {
    if (ts.isElementAccessExpression(node)) {
      const keyType = checker.getTypeAtLocation(node.argumentExpression);
      if (
        !ts.isStringLiteralLike(node.argumentExpression) &&
        isStringKey(keyType) &&
        isPlainRecord(checker.getTypeAtLocation(node.expression)) &&
        !ownKeyOf(node.argumentExpression, node.expression, source) &&
        !guarded(node, source)
      ) {
        const { line } = source.getLineAndCharacterOfPosition(node.getStart(source));
        findings.push(`${relative(root, source.fileName)}:${line + 1}: ${node.getText(source)}`);
      }
    }
    ts.forEachChild(node, visit);
  };
  visit(source);
}

if (findings.length > 0) {
  console.error(
    `${findings.length} plain object(s) indexed by a string that may be input (use a Map, Object.hasOwn, or say why with // own-key: …):`,
  );
  for (const f of findings) console.error(`  ${f}`);
  process.exit(1);
}
console.log('object keys: no plain object indexed by a string that may be input');
