#!/usr/bin/env node
'use strict';
/*
 * tools/prices.js - converts the price data of the npm package
 * @pydantic/genai-prices (MIT) into the project's price format
 * (include/pc_pricing.h), once, at build time (`make prices`):
 *
 *   node tools/prices.js --package DIR --date YYYY-MM-DD [--providers a,b] -o OUT
 *
 * DIR is the unpacked package (its package.json and dist/index.js). The data
 * is read through the package's own API (waitForUpdate() answers the
 * providers it ships, without a network call), so nothing of it is parsed
 * here but plain objects.
 *
 * What is kept, per provider in the order given, per model in the package's
 * order (the order in which rules are tried):
 *   - the token prices in force on --date (the package's release day, so the
 *     same package always gives the same file): a price list with start
 *     dates takes the last one begun by then; one priced by the time of day
 *     takes the prices of the larger part of the day (the proxy has one
 *     price per model); a tiered price (dearer past a prompt length) keeps
 *     its base;
 *   - input_mtok, output_mtok, cache_read_mtok, cache_write_mtok (the
 *     5-minute write), cache_write_1h_mtok (a write kept for an hour),
 *     input_audio_mtok and output_audio_mtok (audio tokens); models priced only per page, hour or request are
 *     left out, and so is a model whose cache read is dearer than its input;
 *   - the match rule, as it is: genai-prices' vocabulary is the project's,
 *     but its regular expressions are JavaScript's and the proxy's are POSIX
 *     extended: \d becomes [0-9], (?: becomes (, and ^(?!X) becomes
 *     {"not": {"regex": "^X"}}; an alternative of an "or" that cannot be
 *     translated is dropped (the rule then prices fewer names, never a wrong
 *     one), a model whose rule needs it otherwise is left out.
 * A model id already taken by an earlier provider is kept as PROVIDER/ID.
 * What was left out is counted on stderr.
 */
const fs = require('node:fs');
const path = require('node:path');
const {pathToFileURL} = require('node:url');

/*
 * The vendors of the models the proxy fronts by their own names. Hosts of
 * open-weight models (groq, together, fireworks, openrouter, ...) are left
 * out by default: their prices for a Llama or Qwen would price a vLLM or
 * SGLang replica of one's own as if it were rented (--providers adds them).
 */
const DEFAULT_PROVIDERS = ['openai', 'anthropic', 'google', 'mistral', 'deepseek', 'x-ai', 'cohere',
    'moonshotai', 'zhipuai', 'minimax', 'voyageai'];
const PRICING_MAX = 10000; /* per million: what pc_pricing.h accepts */
const KEYS = {input: 'input_mtok', output: 'output_mtok', cache_read: 'cache_read_mtok',
    cache_write: 'cache_write_mtok', cache_write_1h: 'cache_write_1h_mtok',
    input_audio: 'input_audio_mtok', output_audio: 'output_audio_mtok'};

function usage(msg) {
    process.stderr.write(`prices: ${msg}\nusage: node tools/prices.js --package DIR --date YYYY-MM-DD ` +
        '[--providers a,b,...] -o OUT\n');
    process.exit(2);
}

function args(argv) {
    const o = {providers: DEFAULT_PROVIDERS};
    for (let i = 0; i < argv.length; i++) {
        const v = argv[i + 1];
        if (argv[i] === '--package') o.pkg = v;
        else if (argv[i] === '--date') o.date = v;
        else if (argv[i] === '--providers') o.providers = v.split(',').filter(Boolean);
        else if (argv[i] === '-o') o.out = v;
        else usage(`unknown argument ${argv[i]}`);
        i++;
    }
    if (!o.pkg || !o.out) usage('--package and -o are needed');
    if (!/^\d{4}-\d{2}-\d{2}$/.test(o.date || '')) usage('--date YYYY-MM-DD is needed');
    return o;
}

/* ---- prices ---------------------------------------------------------------- */

/* Minutes of the day in a time_of_date window ("00:30:00Z" to "16:30:00Z", maybe over midnight). */
function windowMinutes(k) {
    const min = (t) => Number(t.slice(0, 2)) * 60 + Number(t.slice(3, 5));
    return (min(k.end_time) - min(k.start_time) + 1440) % 1440;
}

/*
 * The price set in force on date: the last one begun by then. A list priced
 * by the time of day (DeepSeek: standard hours and off-peak ones) is one
 * price to the proxy: the set in force for the larger part of the day.
 */
function pricesOn(model, date) {
    if (!Array.isArray(model.prices))
        return model.prices;
    let best = null, bestStart = '';
    const windows = [];
    for (const c of model.prices) {
        const k = c.constraint;
        if (k && k.type === 'time_of_date') {
            windows.push({prices: c.prices, minutes: windowMinutes(k)});
            continue;
        }
        const start = k && k.start_date ? k.start_date : '';
        if (start <= date && (best === null || start >= bestStart)) {
            best = c.prices;
            bestStart = start;
        }
    }
    const rest = 1440 - windows.reduce((n, w) => n + w.minutes, 0);
    const longest = windows.sort((a, b) => b.minutes - a.minutes)[0];
    return longest && (best === null || longest.minutes > rest) ? longest.prices : best;
}

/* A number, or a tiered price's base. */
const base = (v) => (v && typeof v === 'object' ? v.base : v);

/* The entry's prices in the project's format, or a reason why it is left out. */
function entryPrices(p) {
    if (p === null)
        return {why: 'no price in force on the date'};
    const tokenKeys = Object.keys(p).filter((k) => k.endsWith('_mtok'));
    if (Object.keys(p).length > 0 && p.input_mtok === undefined)
        return {why: tokenKeys.length ? 'no input price' : 'priced per page, hour or request'};
    const e = {};
    for (const [ours, theirs] of Object.entries(KEYS)) {
        const v = base(p[theirs]);
        if (v === undefined)
            continue;
        if (typeof v !== 'number' || !(v >= 0 && v <= PRICING_MAX))
            return {why: `${theirs} out of range`};
        e[ours] = v;
    }
    e.input = e.input ?? 0; /* {} is a free model: genai-prices prices it 0 */
    if (e.cache_read !== undefined && e.cache_read > e.input)
        return {why: 'a cache read dearer than input'};
    return {e};
}

/* ---- match rules ------------------------------------------------------------- */

/* A JavaScript regex as POSIX extended, or null if it uses what ERE lacks. */
function posixRegex(re) {
    const out = re.replace(/\\d/g, '[0-9]').replace(/\(\?:/g, '(');
    return /\(\?|\\[wWsSbBDpPk]|\\[1-9]|\*\?|\+\?|\?\?/.test(out) ? null : out;
}

/* One rule translated, or null if it cannot be. */
function rule(m) {
    const [op, v] = Object.entries(m)[0] || [];
    if (['equals', 'starts_with', 'ends_with', 'contains'].includes(op))
        return {[op]: v};
    if (op === 'regex') {
        const neg = /^\^\(\?!(.*)\)$/.exec(v);
        const inner = neg ? posixRegex(neg[1]) : posixRegex(v);
        if (inner === null)
            return null;
        return neg ? {not: {regex: '^' + inner}} : {regex: inner};
    }
    if (op === 'or') {
        const kids = v.map(rule).filter((k) => k !== null);
        return kids.length ? {or: kids} : null;
    }
    if (op === 'and') {
        const kids = v.map(rule);
        return kids.every((k) => k !== null) ? {and: kids} : null;
    }
    return null;
}

/* ---- the list ------------------------------------------------------------------ */

function convert(providers, wanted, date) {
    const models = {};
    const left = {};
    const leave = (why) => (left[why] = (left[why] || 0) + 1);
    for (const id of wanted) {
        const prov = providers.find((p) => p.id === id);
        if (!prov)
            throw new Error(`provider ${id} is not in the package (${providers.map((p) => p.id).join(', ')})`);
        for (const m of prov.models) {
            const {e, why} = entryPrices(pricesOn(m, date));
            if (!e) {
                leave(why);
                continue;
            }
            const match = rule(m.match);
            if (match === null) {
                leave('a match rule POSIX regular expressions cannot say');
                continue;
            }
            e.match = match;
            const name = models[m.id] === undefined ? m.id : `${id}/${m.id}`;
            if (models[name] !== undefined) {
                leave('the same id twice');
                continue;
            }
            models[name] = e;
        }
    }
    return {models, left};
}

async function main() {
    const o = args(process.argv.slice(2));
    const pkg = JSON.parse(fs.readFileSync(path.join(o.pkg, 'package.json'), 'utf8'));
    if (pkg.name !== '@pydantic/genai-prices')
        usage(`${o.pkg} holds ${pkg.name}, not @pydantic/genai-prices`);
    const mod = await import(pathToFileURL(path.resolve(o.pkg, 'dist', 'index.js')).href);
    const providers = await mod.waitForUpdate();
    const {models, left} = convert(providers, o.providers, o.date);
    const list = {
        note: 'Generated by tools/prices.js from the npm package @pydantic/genai-prices (MIT): ' +
            'USD per million tokens, the prices in force on "date", each model with the names ' +
            'genai-prices matches (POSIX regular expressions). Not committed: `make prices` ' +
            'writes it again.',
        source: `@pydantic/genai-prices ${pkg.version}`,
        date: o.date,
        currency: 'USD',
        providers: o.providers,
        models,
    };
    fs.writeFileSync(o.out, JSON.stringify(list, null, 1) + '\n');
    const n = Object.keys(models).length;
    const skipped = Object.entries(left).map(([why, k]) => `${k} ${why}`).join('; ');
    process.stderr.write(`prices: ${n} model${n === 1 ? '' : 's'} of ${o.providers.length} ` +
        `provider${o.providers.length === 1 ? '' : 's'} -> ${o.out}` +
        (skipped ? ` (left out: ${skipped})` : '') + '\n');
}

main().catch((e) => {
    process.stderr.write(`prices: ${e.message}\n`);
    process.exit(1);
});
