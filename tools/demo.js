'use strict';
/*
 * demo.js - `make demo`: promptcache in front of the project's mock upstream
 * (so no API key is needed), a small mixed workload, and what the cache did.
 *
 * It starts a private redis-server, the mock upstream and the proxy (the same
 * helpers the integration tests use), sends OpenAI and Anthropic requests -
 * repeats, reordered JSON, streams served from answers first fetched as JSON,
 * rewordings answered by the semantic cache (and look-alikes it refuses),
 * another tenant, a burst of identical concurrent misses - prints one line per
 * request, then the hit rate, the counters and the money from /stats (at the
 * shipped list prices). With DEMO_KEEP=1 everything stays up until Ctrl-C, so
 * /dashboard and /stats can be opened in a browser.
 *
 * It needs only node's own modules (no npm install): the mock upstream and
 * the process helpers come from tests/, nothing else of the test tooling.
 */
const path = require('node:path');
const lib = require(path.join(__dirname, '..', 'tests', 'integration', 'lib'));

const QUESTIONS = [
    'What is the capital of France?',
    'Explain a hash table in one sentence.',
    'Give me a haiku about caching.',
    'How many legs does a spider have?',
    'Translate "good morning" to Spanish.',
];

function chat(question, extra = {}) {
    return {model: 'gpt-4o-mini', messages: [
        {role: 'system', content: 'You are a concise assistant.'},
        {role: 'user', content: question}], temperature: 0, ...extra};
}

function claude(question, extra = {}) {
    return {model: 'claude-sonnet-4-5', max_tokens: 256,
        messages: [{role: 'user', content: question}], ...extra};
}

/* The same JSON with its keys in another order and extra white space. */
function reordered(body) {
    const keys = Object.keys(body).reverse();
    return JSON.stringify(Object.fromEntries(keys.map((k) => [k, body[k]])), null, 2);
}

function line(label, res, ms) {
    const status = res.headers['x-cache-status'] || '-';
    const sim = res.headers['x-cache-similarity'] ? ` ${res.headers['x-cache-similarity']}` : '';
    const match = res.headers['x-cache-match'] ? ` (${res.headers['x-cache-match']}${sim})` : '';
    console.log(`  ${String(res.status).padEnd(4)}${(status + match).padEnd(26)}` +
        `${ms.toFixed(1).padStart(7)} ms  ${label}`);
}

async function send(proxy, label, reqPath, body, headers = {}) {
    const started = process.hrtime.bigint();
    const res = await proxy.post(reqPath, body, headers);
    line(label, res, Number(process.hrtime.bigint() - started) / 1e6);
    return res;
}

async function workload(proxy) {
    const chatPath = '/v1/chat/completions';
    console.log('\nOpenAI chat: first asks go upstream (MISS), repeats come from Redis (HIT)');
    for (const q of QUESTIONS)
        await send(proxy, q, chatPath, chat(q), {'x-mock-delay-ms': '120'});
    for (const q of QUESTIONS.slice(0, 3))
        await send(proxy, `${q} (again)`, chatPath, chat(q));
    await send(proxy, `${QUESTIONS[0]} (keys reordered)`, chatPath, reordered(chat(QUESTIONS[0])));
    await send(proxy, `${QUESTIONS[1]} (streamed from the cached JSON)`, chatPath,
        chat(QUESTIONS[1], {stream: true}));
    await send(proxy, `${QUESTIONS[2]} (temperature 0.7: another question)`, chatPath,
        chat(QUESTIONS[2], {temperature: 0.7}));
    await send(proxy, `${QUESTIONS[3]} (another tenant)`, chatPath, chat(QUESTIONS[3]),
        {authorization: 'Bearer sk-demo-other-team'});

    console.log('\nSemantic cache: the same question in other words is a HIT by meaning;');
    console.log('a question that differs in a number, a name or a negation is not');
    await send(proxy, 'what is the capital of france', chatPath, chat('what is the capital of france'));
    await send(proxy, 'Capital of France - what is it?', chatPath, chat('Capital of France - what is it?'));
    await send(proxy, 'explain a hash tabel in one sentence', chatPath, chat('explain a hash tabel in one sentence'));
    await send(proxy, 'What is the capital of Spain?', chatPath, chat('What is the capital of Spain?'));
    await send(proxy, 'How many legs does a spider not have?', chatPath,
        chat('How many legs does a spider not have?'));

    console.log('\nAnthropic messages: a stream first, then JSON from the recorded stream');
    await send(proxy, 'Name three primes. (stream)', '/v1/messages',
        claude('Name three primes.', {stream: true}), {'x-mock-delay-ms': '120'});
    await send(proxy, 'Name three primes. (JSON)', '/v1/messages', claude('Name three primes.'));
    await send(proxy, 'Name three primes. (stream again)', '/v1/messages',
        claude('Name three primes.', {stream: true}));

    console.log('\nFive identical requests at once: one upstream call, shared by all');
    const burst = chat('What is request coalescing?');
    await Promise.all([...Array(5)].map(() =>
        send(proxy, 'What is request coalescing?', chatPath, burst, {'x-mock-delay-ms': '300'})));
}

/* An amount of money in the price list's currency, with enough digits for a few requests. */
function money(amount, currency) {
    const n = Number(amount) || 0;
    const digits = n !== 0 && Math.abs(n) < 0.01 ? 6 : 4;
    return `${n.toFixed(digits)} ${currency || ''}`.trim();
}

function summary(s) {
    const cur = s.currency;
    const priced = cur !== null && cur !== undefined;
    return `
hit rate ${(100 * s.hit_rate).toFixed(1)}%: ${s.cache_hits} hits (${s.cache_hits_exact} exact, ` +
        `${s.cache_hits_semantic} semantic), ${s.cache_misses} misses, ` +
        `${s.coalesced} coalesced; ${s.upstream_requests} upstream calls for ` +
        `${s.requests_cacheable} requests
tokens served from the cache: ${s.tokens_saved_prompt} prompt + ` +
        `${s.tokens_saved_completion} completion
` + (priced
        ? `money at list price: the upstream calls cost ${money(s.upstream_cost, cur)}; the cache ` +
          `saved ${money(s.saved_cost, cur)} (${money(s.saved_cost_exact, cur)} exact, ` +
          `${money(s.saved_cost_semantic, cur)} semantic), ${money(s.net_saved_cost, cur)} net of ` +
          'its own calls'
        : 'money: no price list loaded (pricing off or not found), so no money figures');
}

/* DEMO_KEEP=1: keep everything up until SIGINT/SIGTERM. */
function keepUp(proxy) {
    console.log(`
still running (DEMO_KEEP=1): open ${proxy.url}/dashboard or ${proxy.url}/stats;
send more requests to ${proxy.url}/v1/chat/completions (any API key); Ctrl-C stops everything`);
    return new Promise((resolve) => {
        process.once('SIGINT', resolve);
        process.once('SIGTERM', resolve);
    });
}

async function main() {
    const redis = await lib.startRedis();
    const mock = await lib.startMock();
    const proxy = await lib.startProxy({mock, redis, logLevel: 'notice',
        /* The mock's answers are numbered, not by meaning: semantic-max-error would compare them,
         * find them all different and (rightly) serve nothing by meaning. */
        args: ['--semantic', 'yes', '--semantic-max-error', 'off', '--embedder', 'builtin']});
    try {
        console.log(`promptcache ${proxy.url} -> mock upstream ${mock.url}, Redis ${redis.url}`);
        await proxy.waitReady();
        await workload(proxy);
        console.log(summary(await proxy.stats()));
        if (process.env.DEMO_KEEP === '1')
            await keepUp(proxy);
        else
            console.log(`(DEMO_KEEP=1 make demo keeps it up for ${proxy.url}/dashboard; ` +
                'this demo stops everything now)');
    } finally {
        await proxy.stop();
        await mock.close();
        await redis.stop();
    }
}

main().catch((e) => {
    console.error(`demo failed: ${e.stack || e.message}`);
    process.exit(1);
});
