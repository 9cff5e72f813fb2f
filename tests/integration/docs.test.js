'use strict';
/*
 * The documentation the binary writes about itself: `promptcache --man 1`
 * and `--man 5` are manual pages that groff renders without a warning
 * (-ww: every warning) and that name every key the binary knows (the keys
 * of `-T`), `--config-doc` has a heading per key, and a bad --man section
 * is a usage error. `make docs-check` compares the committed files in doc/
 * with the same output.
 */
const assert = require('node:assert/strict');
const {execFile} = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');
const h = require('./lib');

/* Run a program with stdin from a file; resolves to {code, stdout, stderr}. */
function run(cmd, args, input) {
    return new Promise((resolve) => {
        const child = execFile(cmd, args, {maxBuffer: 16 << 20}, (err, stdout, stderr) =>
            resolve({code: err ? (err.code ?? 1) : 0, stdout, stderr, missing: err?.code === 'ENOENT'}));
        child.stdin.end(input);
    });
}

/* The keys the binary knows, from the effective configuration it prints. */
async function keys() {
    const r = await h.runCli(['-T']);
    assert.equal(r.code, 0, r.output);
    const names = r.stdout.split('\n').filter((l) => /^[a-z]/.test(l)).map((l) => l.split(' ')[0]);
    assert.ok(names.length >= 60, `keys of -T: ${names.length}`);
    return [...new Set(names)];
}

/* A page through groff with every warning on; the text without fonts, dashes as '-'. */
async function render(page) {
    const r = await run('groff', ['-man', '-Tutf8', '-ww', '-P', '-cbou'], page);
    if (r.missing)
        return null;
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.stderr, '', 'groff -ww warns');
    return r.stdout.replace(/[\u2010\u2212]/g, '-');
}

h.test('promptcache(1) and promptcache.conf(5) render without a warning and name every key', async (t) => {
    const all = await keys();
    const man1 = await h.runCli(['--man', '1']);
    const man5 = await h.runCli(['--man', '5']);
    assert.equal(man1.code, 0, man1.output);
    assert.equal(man5.code, 0, man5.output);
    const text1 = await render(man1.stdout);
    const text5 = await render(man5.stdout);
    if (text1 === null)
        return t.skip('groff is not installed (make deps-test installs groff-base)');
    assert.match(text1, /^PROMPTCACHE\(1\)/);
    assert.match(text5, /^PROMPTCACHE\.CONF\(5\)/);
    for (const k of all) {
        assert.ok(text1.includes(`--${k} `), `promptcache(1) lists --${k}`);
        assert.match(text5, new RegExp(`\\n {7}${k}( |\\n)`), `promptcache.conf(5) describes ${k}`);
    }
    for (const form of ['migrate', 'report', 'purge', 'kv-size', '--healthcheck', '-T'])
        assert.ok(text1.includes(`promptcache ${form}`), `promptcache(1) has promptcache ${form}`);
});

h.test('--config-doc has a heading and a link per key', async () => {
    const all = await keys();
    const r = await h.runCli(['--config-doc']);
    assert.equal(r.code, 0, r.output);
    for (const k of all) {
        assert.ok(r.stdout.includes(`\n#### \`${k}\`\n`), `heading of ${k}`);
        assert.ok(r.stdout.includes(`(#${k})`), `link to ${k}`);
    }
});

h.test('--man takes 1 or 5', async () => {
    for (const args of [['--man'], ['--man', '7'], ['--man', 'promptcache']]) {
        const r = await h.runCli(args);
        assert.equal(r.code, 2, r.output);
        assert.match(r.stderr, /--man takes 1 \(promptcache\) or 5/);
        assert.equal(r.stdout, '');
    }
});

h.test('the committed manual pages are the binary\'s', async () => {
    for (const [file, section] of [['promptcache.1', '1'], ['promptcache.conf.5', '5']]) {
        const committed = path.join(h.REPO, 'doc', file);
        const r = await h.runCli(['--man', section]);
        assert.equal(fs.readFileSync(committed, 'utf8'), r.stdout, `doc/${file}: run make docs`);
    }
});
