'use strict';
/*
 * bench/lib/variants.js - labelled pairs made from dev questions, for the
 * semantic benchmarks: near-duplicate variants (typos, case, punctuation,
 * white space, word order, filler words, singular/plural: each keeps the
 * question's meaning) and counterfeits (one number, name, date or negation
 * changed, and issue 20's symbol classes from templates written here: each
 * changes it). Deterministic for a given list of questions.
 *
 *   buildVariants(questions, n) -> {variants: [{a, b, pos: true, kind}],
 *                                   counterfeits: [{a, b, pos: false, kind}]}
 *   distinctQuestions(rows, columns) -> the distinct texts of those columns of
 *                                   parsed CSV rows, 20 to 200 characters, in order
 *   shuffle(xs, r) -> xs shuffled in place by the draws of r (rng(seed))
 */

function rng(seed) {
    let s = seed >>> 0;
    return () => ((s = (s * 1664525 + 1013904223) >>> 0) / 2 ** 32);
}

const FILLERS = [['please ', ''], ['can you tell me ', ''], ['', ' please'], ['hey, ', ''], ['so ', '']];
const NAMES = ['Paris', 'Berlin', 'Tokyo', 'Madrid', 'Canada', 'Brazil', 'Google', 'Apple', 'Obama', 'Einstein'];
const MONTHS = ['January', 'February', 'March', 'April', 'May', 'June', 'July', 'August', 'September',
    'October', 'November', 'December'];

/* One near-duplicate of q, of a kind chosen by r; null when the kind does not apply. */
function variant(q, kind, r) {
    const words = q.split(/\s+/).filter(Boolean);
    switch (kind) {
    case 'typo': {
        const idx = words.map((w, i) => (/^[a-z]{5,}$/i.test(w) ? i : -1)).filter((i) => i >= 0);
        if (!idx.length) return null;
        const i = idx[Math.floor(r() * idx.length)], w = words[i], j = 1 + Math.floor(r() * (w.length - 3));
        words[i] = w.slice(0, j) + w[j + 1] + w[j] + w.slice(j + 2);
        return words.join(' ');
    }
    case 'case': return r() < 0.5 ? q.toLowerCase() : q.toUpperCase();
    case 'punctuation': return /[?.!]$/.test(q) ? q.replace(/[?.!]+$/, '') : `${q}?`;
    case 'whitespace': return `  ${words.join('   ')} `;
    case 'order': {
        /* Move a trailing "in/for/on/with ..." phrase to the front: same question, other order. */
        const m = /^(.*\S)\s+((?:in|for|on|with|at|during) [^,?]+)\?*$/i.exec(q);
        return m ? `${m[2][0].toUpperCase()}${m[2].slice(1)}, ${m[1][0].toLowerCase()}${m[1].slice(1)}?` : null;
    }
    case 'filler': {
        const [pre, post] = FILLERS[Math.floor(r() * FILLERS.length)];
        return `${pre}${q.replace(/\?$/, '')}${post}?`;
    }
    case 'plural': {
        const idx = words.map((w, i) => (/^[a-z]{4,}$/.test(w) && !/ss$/.test(w) ? i : -1)).filter((i) => i >= 0);
        if (!idx.length) return null;
        const i = idx[idx.length - 1];
        words[i] = words[i].endsWith('s') ? words[i].slice(0, -1) : `${words[i]}s`;
        return words.join(' ');
    }
    default: return null;
    }
}

/* One counterfeit of q (a meaning changed by one token), of a kind; null when it does not apply. */
function counterfeit(q, kind, r) {
    switch (kind) {
    case 'number': {
        const m = /\d+/.exec(q);
        return m ? q.slice(0, m.index) + String(Number(m[0]) + 1 + Math.floor(r() * 9)) + q.slice(m.index + m[0].length) : null;
    }
    case 'name': {
        const m = /(?<=\S\s)([A-Z][a-z]{2,})/.exec(q);
        if (!m) return null;
        const other = NAMES.filter((n) => n !== m[1]);
        return q.slice(0, m.index) + other[Math.floor(r() * other.length)] + q.slice(m.index + m[1].length);
    }
    case 'date': {
        const m = new RegExp(`\\b(${MONTHS.join('|')}|19\\d\\d|20\\d\\d)\\b`).exec(q);
        if (!m) return null;
        const rep = /^\d/.test(m[1]) ? String(Number(m[1]) + 1) : MONTHS[(MONTHS.indexOf(m[1]) + 1) % 12];
        return q.slice(0, m.index) + rep + q.slice(m.index + m[1].length);
    }
    case 'negation': {
        if (/\bnot\b/i.test(q)) return q.replace(/\s*\bnot\b/i, '');
        const m = /\b(is|are|was|were|can|should|does|do|will)\b/i.exec(q);
        return m ? q.slice(0, m.index + m[1].length) + ' not' + q.slice(m.index + m[1].length) : null;
    }
    default: return null;
    }
}

const VARIANT_KINDS = ['typo', 'case', 'punctuation', 'whitespace', 'order', 'filler', 'plural'];
const COUNTERFEIT_KINDS = ['number', 'name', 'date', 'negation'];

/*
 * Counterfeits that differ only in a symbol (issue 20's classes), from
 * templates written here with random operands: each is [kind, maker(r)],
 * the maker answering [question, its counterfeit].
 */
const pick = (r, xs) => xs[Math.floor(r() * xs.length)];
const int = (r) => 2 + Math.floor(r() * 98);
const VARS = ['a', 'b', 'x', 'y', 'i', 'n', 'count', 'total'];
const CALC = [(e) => `What is ${e}?`, (e) => `Can you compute ${e} for me?`, (e) => `quick question: ${e} = ?`,
    (e) => `How much is ${e}`];
const SYMBOL_KINDS = [
    ['operator', (r) => { const [a, b, f] = [int(r), int(r), pick(r, CALC)]; return [f(`${a}+${b}`), f(`${a}*${b}`)]; }],
    ['minus', (r) => { const [a, b, f] = [int(r), int(r), pick(r, CALC)]; return [f(`${a}-${b}`), f(`${a}+${b}`)]; }],
    ['power', (r) => { const [a, b, f] = [int(r), int(r), pick(r, CALC)]; return [f(`${a}^${b}`), f(`${a}*${b}`)]; }],
    ['fraction', (r) => {
        const a = int(r), b = a + 1 + Math.floor(r() * 9), f = pick(r, CALC);
        return [f(`${a}/${b}`), f(`${b}/${a}`)];
    }],
    ['sign', (r) => {
        const a = int(r);
        const q = pick(r, [(x) => `Is ${x} degrees Celsius cold?`, (x) => `Is ${x} a root of x^2 = ${a * a}?`,
            (x) => `What is the square root of ${x}?`, (x) => `Is a balance of ${x} dollars bad?`]);
        return [q(`-${a}`), q(`${a}`)];
    }],
    ['comparison', (r) => {
        const [a, b] = [int(r), int(r)], [x, y] = pick(r, [['>', '<'], ['>=', '<='], ['>', '>='], ['<', '<=']]);
        const q = pick(r, [(op) => `Is x ${op} ${a} when x is ${b}?`, (op) => `Why does if (n ${op} ${a}) fail for ${b}?`]);
        return [q(x), q(y)];
    }],
    ['equality', (r) => {
        const [v, w] = [pick(r, VARS), pick(r, VARS)], [x, y] = pick(r, [['!=', '=='], ['==', '='], ['===', '==']]);
        return [`Why is ${v} ${x} ${w} true here?`, `Why is ${v} ${y} ${w} true here?`];
    }],
    ['path', (r) => {
        const cmd = pick(r, ['rm -rf', 'ls -la', 'cd', 'du -sh', 'chmod -R 755']);
        const [x, y] = pick(r, [['/', '~'], ['./src', '../src'], ['/tmp', '~/tmp'], ['~/.ssh', '/.ssh']]);
        return [`What does ${cmd} ${x} do?`, `What does ${cmd} ${y} do?`];
    }],
    ['regex', (r) => {
        const c = pick(r, ['a', 'b', 'x', 'ab', '[0-9]']), [x, y] = pick(r, [['+', '*'], ['*', '?'], ['+', '?']]);
        return [`Does the regex ^${c}${x}$ match ${c}${c}${c}?`, `Does the regex ^${c}${y}$ match ${c}${c}${c}?`];
    }],
    ['code', (r) => {
        const [v, w] = [pick(r, VARS), pick(r, VARS)];
        return pick(r, [
            [`Explain this line: if (${v} < ${w}) return ${v};`, `Explain this line: if (${v} > ${w}) return ${v};`],
            [`Why does while (${v} < ${w}) loop forever?`, `Why does while (${v} <= ${w}) loop forever?`],
            [`What does ${v} += 1 do in Python?`, `What does ${v} -= 1 do in Python?`],
            [`Is ${v} && ${w} short-circuited?`, `Is ${v} || ${w} short-circuited?`]]);
    }],
];

/* Up to n variants (one per question, the kinds in turn) and as many counterfeits of questions. */
function buildVariants(questions, n) {
    const qs = questions;
    const r = rng(42);
    const variants = [], counterfeits = [], perKind = new Map();
    for (const q of qs) {
        if (variants.length < n) {
            const kind = VARIANT_KINDS[variants.length % VARIANT_KINDS.length];
            const v = variant(q, kind, r);
            if (v && v !== q) variants.push({a: q, b: v, pos: true, kind});
        }
        for (const kind of COUNTERFEIT_KINDS) {
            if ((perKind.get(kind) || 0) >= n / 4) continue;
            const c = counterfeit(q, kind, r);
            if (c && c !== q) {
                counterfeits.push({a: q, b: c, pos: false, kind});
                perKind.set(kind, (perKind.get(kind) || 0) + 1);
            }
        }
        if (variants.length >= n && counterfeits.length >= n) break;
    }
    for (const [kind, make] of SYMBOL_KINDS) {
        const seen = new Set();
        for (let k = 0; k < 20 * n && seen.size < Math.ceil(n / 10); k++) {
            const [a, b] = make(r);
            if (a !== b && !seen.has(a))
                seen.add(a), counterfeits.push({a, b, pos: false, kind});
        }
    }
    return {variants, counterfeits};
}

function distinctQuestions(rows, columns) {
    const seen = new Set(), qs = [];
    for (const r of rows)
        for (const c of columns) {
            const q = (r[c] || '').trim();
            if (q.length >= 20 && q.length <= 200 && !seen.has(q))
                seen.add(q), qs.push(q);
        }
    return qs;
}

function shuffle(xs, r) {
    for (let i = xs.length - 1; i > 0; i--) {
        const j = Math.floor(r() * (i + 1));
        [xs[i], xs[j]] = [xs[j], xs[i]];
    }
    return xs;
}

module.exports = {buildVariants, distinctQuestions, shuffle, rng, VARIANT_KINDS, COUNTERFEIT_KINDS};
