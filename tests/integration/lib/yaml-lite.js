'use strict';
/*
 * yaml-lite.js - reads the small YAML subset the project's own files use
 * (docker-compose.yml), so that the tests need no YAML package: block
 * mappings and sequences by indentation, "- key: value" items, flow
 * sequences ([a, "b"]), plain, 'single' and "double" quoted scalars (double
 * quotes with JSON escapes), true/false/null, and # comments. No anchors,
 * flow mappings or multi-line strings: a line it cannot read is an error,
 * never a guess. Scalars other than true/false/null stay strings.
 */

/* The line without its comment (a # at the start or after a space, outside quotes). */
function stripComment(line) {
    let quote = null;
    for (let i = 0; i < line.length; i++) {
        const c = line[i];
        if (quote) {
            if (c === '\\' && quote === '"')
                i++;
            else if (c === quote)
                quote = null;
        } else if (c === '"' || c === "'") {
            quote = c;
        } else if (c === '#' && (i === 0 || /\s/.test(line[i - 1]))) {
            return line.slice(0, i);
        }
    }
    return line;
}

/* Split a flow sequence's inside on commas outside quotes. */
function splitFlow(s) {
    const parts = [];
    let quote = null;
    let start = 0;
    for (let i = 0; i < s.length; i++) {
        const c = s[i];
        if (quote) {
            if (c === '\\' && quote === '"')
                i++;
            else if (c === quote)
                quote = null;
        } else if (c === '"' || c === "'") {
            quote = c;
        } else if (c === ',') {
            parts.push(s.slice(start, i));
            start = i + 1;
        }
    }
    if (s.slice(start).trim() !== '')
        parts.push(s.slice(start));
    return parts.map((p) => p.trim());
}

function scalar(s) {
    s = s.trim();
    if (s.startsWith('"'))
        return JSON.parse(s);
    if (s.startsWith("'")) {
        if (!s.endsWith("'") || s.length < 2)
            throw new Error(`yaml-lite: unterminated quote: ${s}`);
        return s.slice(1, -1).replace(/''/g, "'");
    }
    if (s.startsWith('[')) {
        if (!s.endsWith(']'))
            throw new Error(`yaml-lite: flow sequence on several lines: ${s}`);
        return splitFlow(s.slice(1, -1)).map(scalar);
    }
    if (s.startsWith('{') || s.startsWith('&') || s.startsWith('*') || s.startsWith('|') || s.startsWith('>'))
        throw new Error(`yaml-lite: unsupported construct: ${s}`);
    if (s === 'true' || s === 'false')
        return s === 'true';
    if (s === 'null' || s === '~' || s === '')
        return null;
    return s;
}

const MAP_LINE = /^("(?:[^"\\]|\\.)*"|'[^']*'|[^\s"'#][^:]*?):(?:\s+(.*))?$/;

function parse(text) {
    const lines = [];
    for (const raw of text.split('\n')) {
        const s = stripComment(raw).replace(/\s+$/, '');
        if (s.trim() === '' || s.trim() === '---')
            continue;
        if (/^\s*\t/.test(s))
            throw new Error(`yaml-lite: tab in indentation: ${raw}`);
        lines.push({indent: s.length - s.trimStart().length, text: s.trim()});
    }
    let i = 0;
    const isItem = (l) => l.text === '-' || l.text.startsWith('- ');

    function block(indent) {
        return isItem(lines[i]) ? seq(indent) : map(indent);
    }

    /* A nested value after "key:" or "-": deeper lines, or a sequence at the key's indent. */
    function nested(indent) {
        if (i < lines.length && (lines[i].indent > indent || (lines[i].indent === indent && isItem(lines[i]))))
            return block(lines[i].indent);
        return null;
    }

    function map(indent) {
        const out = {};
        while (i < lines.length && lines[i].indent === indent && !isItem(lines[i])) {
            const m = MAP_LINE.exec(lines[i].text);
            if (!m)
                throw new Error(`yaml-lite: cannot read "${lines[i].text}"`);
            const key = scalar(m[1]);
            if (Object.prototype.hasOwnProperty.call(out, key))
                throw new Error(`yaml-lite: duplicate key ${key}`);
            i++;
            out[key] = m[2] !== undefined && m[2] !== '' ? scalar(m[2]) : nested(indent);
        }
        if (i < lines.length && lines[i].indent > indent)
            throw new Error(`yaml-lite: unexpected indentation at "${lines[i].text}"`);
        return out;
    }

    function seq(indent) {
        const out = [];
        while (i < lines.length && lines[i].indent === indent && isItem(lines[i])) {
            const rest = lines[i].text.slice(1).trimStart();
            if (rest === '') {
                i++;
                out.push(nested(indent));
            } else if (MAP_LINE.test(rest) && !/^["'[]/.test(rest)) {
                lines[i] = {indent: indent + (lines[i].text.length - rest.length), text: rest};
                out.push(map(lines[i].indent));
            } else {
                out.push(scalar(rest));
                i++;
            }
        }
        return out;
    }

    const doc = lines.length ? block(lines[0].indent) : null;
    if (i < lines.length)
        throw new Error(`yaml-lite: cannot read "${lines[i].text}"`);
    return doc;
}

/* Compose-style ${VAR}, ${VAR:-default}, ${VAR-default} with the variables in vars. */
function interpolate(value, vars = {}) {
    if (typeof value === 'string')
        return value.replace(/\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?-)([^}]*))?\}/g, (_, name, op, def) => {
            const v = vars[name];
            if (v === undefined || (op === ':-' && v === ''))
                return def === undefined ? '' : def;
            return v;
        });
    if (Array.isArray(value))
        return value.map((v) => interpolate(v, vars));
    if (value && typeof value === 'object')
        return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, interpolate(v, vars)]));
    return value;
}

module.exports = {parse, interpolate};
