import { readdirSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

// docs/adr/README.md is the index of the decision records: every record is listed there with
// its status, and every link in it leads to a record that exists.
const folder = fileURLToPath(new URL('../docs/adr/', import.meta.url));
const records = readdirSync(folder).filter((name) => /^\d{4}-.+\.md$/.test(name));
const index = readFileSync(`${folder}README.md`, 'utf8');

describe('the ADR index', () => {
  it('lists every record, by its number, title and file', () => {
    const missing = records.filter((file) => {
      const number = Number(file.slice(0, 4));
      const title = readFileSync(`${folder}${file}`, 'utf8')
        .split('\n', 1)[0]
        ?.replace(/^# \d+\. /, '');
      return !index.includes(`| [${number}](${file}) | ${title} |`);
    });
    expect(missing).toEqual([]);
  });

  it('links only to records that exist', () => {
    const linked = [...index.matchAll(/\]\((\d{4}-[^)]+\.md)\)/g)].map((m) => m[1]);
    expect(linked.filter((file) => !records.includes(file as string))).toEqual([]);
  });

  it('finds a status line at the head of every record', () => {
    const without = records.filter((file) => {
      const head = readFileSync(`${folder}${file}`, 'utf8').split('\n').slice(0, 6).join('\n');
      return !/^Status: (accepted|superseded|proposed|rejected)/m.test(head);
    });
    expect(without).toEqual([]);
  });

  it('says why each unused number below the highest is missing', () => {
    const numbers = new Set(records.map((file) => Number(file.slice(0, 4))));
    const highest = Math.max(...numbers);
    const gaps = Array.from({ length: highest }, (_, i) => i + 1).filter((n) => !numbers.has(n));
    const explained = index.match(/^Numbers? ([\d, and]+) (?:was|were) never used/m)?.[1] ?? '';
    const named = new Set(explained.split(/,\s*|\s+and\s+/).map(Number));
    expect(gaps.filter((n) => !named.has(n))).toEqual([]);
  });
});
