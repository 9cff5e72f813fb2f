#!/usr/bin/env node
'use strict';
/*
 * tools/doclinks.js FILE.md... - every relative link of the Markdown files
 * must reach a file of the repository, and every #anchor a heading of the
 * file it names (GitHub's rule: the heading's text in lower case, without
 * punctuation but - and _, spaces as -, a repeated one with -1, -2...).
 * Links inside code (fenced blocks, `spans`) are not links; http(s) and
 * mailto links are not checked. Prints each broken link as FILE:LINE and
 * exits 1 if there is one (make docs-check runs it).
 */
const fs = require('node:fs');
const path = require('node:path');

/* The lines of a Markdown file that are prose: fenced code blocks blanked. */
function proseLines(text) {
    let fence = null;
    return text.split('\n').map((line) => {
        const m = /^\s{0,3}(```+|~~~+)/.exec(line);
        if (fence === null && m) {
            fence = m[1][0];
            return '';
        }
        if (fence !== null) {
            if (m && m[1][0] === fence)
                fence = null;
            return '';
        }
        return line;
    });
}

/* GitHub's anchor of a heading's text. */
function slug(text) {
    return text
        .replace(/\[([^\]]*)\]\([^)]*\)/g, '$1') /* a link: its text */
        .replace(/<[^>]+>/g, '')
        .trim()
        .toLowerCase()
        .replace(/[^\p{L}\p{M}\p{N}\p{Pc} -]/gu, '')
        .replace(/ /g, '-');
}

const anchorCache = new Map();

/* The anchors of a Markdown file: its headings' slugs and explicit <a id/name>. */
function anchors(file) {
    if (anchorCache.has(file))
        return anchorCache.get(file);
    const set = new Set(), seen = new Map();
    for (const line of proseLines(fs.readFileSync(file, 'utf8'))) {
        const h = /^\s{0,3}#{1,6}\s+(.*?)\s*#*\s*$/.exec(line);
        if (h) {
            const base = slug(h[1]);
            const n = seen.get(base) || 0;
            seen.set(base, n + 1);
            set.add(n === 0 ? base : `${base}-${n}`);
        }
        for (const a of line.matchAll(/<a\s+(?:id|name)="([^"]+)"/g))
            set.add(a[1]);
    }
    anchorCache.set(file, set);
    return set;
}

/* The link targets of one line of prose, code spans left out. */
function targets(line) {
    const text = line.replace(/`+[^`]*`+/g, '');
    const out = [];
    for (const m of text.matchAll(/\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)/g))
        out.push(m[1]);
    const ref = /^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(\s|$)/.exec(text);
    if (ref)
        out.push(ref[1]);
    return out;
}

function check(file) {
    const broken = [];
    proseLines(fs.readFileSync(file, 'utf8')).forEach((line, i) => {
        for (const t of targets(line)) {
            if (/^[a-z][a-z0-9+.-]*:/i.test(t))
                continue; /* http:, https:, mailto: */
            const hash = t.indexOf('#');
            const rel = decodeURI(hash < 0 ? t : t.slice(0, hash));
            const anchor = hash < 0 ? null : decodeURIComponent(t.slice(hash + 1));
            const dest = rel === '' ? file : path.resolve(path.dirname(file), rel);
            const where = `${file}:${i + 1}: ${t}`;
            if (!fs.existsSync(dest))
                broken.push(`${where}: no such file`);
            else if (anchor !== null && dest.endsWith('.md') && !anchors(dest).has(anchor))
                broken.push(`${where}: no heading #${anchor} in ${path.relative('.', dest)}`);
        }
    });
    return broken;
}

const files = process.argv.slice(2);
if (files.length === 0) {
    console.error('usage: tools/doclinks.js FILE.md...');
    process.exit(2);
}
const broken = files.flatMap(check);
for (const b of broken)
    console.error(b);
if (broken.length > 0) {
    console.error(`${broken.length} broken link${broken.length === 1 ? '' : 's'} in the Markdown files`);
    process.exit(1);
}
