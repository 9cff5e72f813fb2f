/*
 * guard.c - semantic guards (see pc_guard.h). Owns the guard table and a
 * small English lexicon (function words, negations, number words, units and
 * currencies, dates, question words, direction words, groups of opposites
 * and of mutually exclusive alternatives, particles, intent words, ranks,
 * quantity words),
 * all written for this project, and reads the word lists converted from
 * WordNet at build time (pc_wordnet.h: antonyms, negations by affix, words
 * of one meaning, adjective degrees).
 *
 *   text a, text b --text_tokenize--> tokens --prepare--> per token: its
 *   lexicon entries, its WordNet forms and the hash of its singular form (a
 *   set per text) --> each enabled guard compares the two texts' features;
 *   the first that differs rejects the pair.
 *
 * The lexicon is sorted once (pthread_once) and read-only afterwards; the
 * WordNet lists are constant data.
 */
#include "pc_guard.h"
#include "pc_conf.h"
#include "pc_text.h"
#include "pc_util.h"
#include "pc_wordnet.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

/* ---- the guard table ------------------------------------------------------ */

static const char *const guard_names[] = {
#define GUARD_NAME(e, name, what) #name,
    GUARD_LIST(GUARD_NAME)
#undef GUARD_NAME
};

static const char *const guard_whats[] = {
#define GUARD_WHAT(e, name, what) what,
    GUARD_LIST(GUARD_WHAT)
#undef GUARD_WHAT
};

const char *guard_name(enum guard_kind g)
{
    return (unsigned)g < GUARD__COUNT ? guard_names[g] : NULL;
}

const char *guard_what(enum guard_kind g)
{
    return (unsigned)g < GUARD__COUNT ? guard_whats[g] : NULL;
}

/* "unknown guard ..." naming every guard, from the table. */
static void unknown_guard(const char *v, char *err, size_t errlen)
{
    struct pc_buf b = PC_BUF_INIT;
    pc_buf_printf(&b, "unknown guard \"%.40s\" (guards:", v);
    for (int g = 0; g < GUARD__COUNT; g++)
        pc_buf_printf(&b, " %s%s", guard_names[g], g + 1 < GUARD__COUNT ? "," : ";");
    pc_buf_append_str(&b, " or all or none alone)");
    snprintf(err, errlen, "%s", pc_buf_cstr(&b));
    pc_buf_free(&b);
}

int guard_parse(char *const *v, size_t n, unsigned *mask, char *err, size_t errlen)
{
    unsigned m = 0;
    for (size_t i = 0; i < n; i++) {
        bool alone = n == 1;
        if (pc_strcaseeq(v[i], "all") && alone) {
            m = GUARD_ALL;
            continue;
        }
        if (pc_strcaseeq(v[i], "none") && alone)
            continue;
        int g = 0;
        while (g < GUARD__COUNT && !pc_strcaseeq(v[i], guard_names[g]))
            g++;
        if (g == GUARD__COUNT) {
            unknown_guard(v[i], err, errlen);
            return -1;
        }
        m |= GUARD_MASK(g);
    }
    *mask = m;
    return 0;
}

/* ---- the lexicon ------------------------------------------------------------ */

enum lex_cat {
    L_FUNC,    /* function word: not content, never an entity */
    L_NEG,     /* negation */
    L_NUMWORD, /* val: the number */
    L_UNIT,    /* val: unit id (units[] index + 1); sub: U_* flags */
    L_MONTH,   /* val: 1..12 */
    L_WEEKDAY, /* val: 1..7 */
    L_WHEN,    /* val: when class */
    L_PERIOD,  /* week, month...: val: period id */
    L_PMOD,    /* this, next, last...: val: modifier id */
    L_QWORD,   /* val: question class */
    L_DIR,     /* to, from, than, before, after... */
    L_GROUP,   /* val: group id; sub: member index */
    L_PART,    /* a particle: val: its group of opposites; sub: its side */
    L_REL,     /* a preposition: val 0 a relation (X in Y), 1 a particle only (off, up...) */
    L_BE,      /* a form of be */
    L_INTENT,  /* undoes or avoids what is asked (prevent, stop, cancel...) */
    L_RANK,    /* an ordinal or rank word (second, last, next...) */
    L_QUANT,   /* a quantity word: val its group of alternatives; sub its side */
    L_TENSE,   /* a tensed form of be or will: sub its tense (present, past, future) */
};

#define U_BIND_ONLY 0x1 /* counts only when bound to a number (am, second, day...) */
#define U_ATTACHED  0x2 /* binds only when written against the number (5m, 100°F) */
#define U_TIME      0x4 /* a unit of time */

struct lex {
    const char *w;
    uint8_t cat;
    uint8_t sub;
    uint16_t val;
    uint16_t same; /* entries from this one on that have the same word (set once sorted) */
};

static const char *const function_words =
    "a an the of to in on at for by with from as into about and or but if so than that this these "
    "those it its is are was were be been being am do does did done have has had i me my we us our "
    "you your he him his she her they them their there here can could would should will shall may "
    "might must some any all also just very really please get got make one up out s t tell know "
    "like want need way what which how who whom whose when where why whats hows thing things much "
    "many other such only own same too again then once each both few most more lot lots give show "
    "find explain describe list using use via vs versus etc ok okay hey hi hello thanks thank let "
    "say said good best top new way ways mean means ever actually exactly basically simply quite "
    "even still already";

/*
 * Negations, and those of the languages near English that users write in
 * (accents folded as the tokenizer folds them): German nicht, kein...,
 * ohne; French ne (n' is glued to its verb), pas, jamais, rien, aucun,
 * sans; Spanish and Portuguese nunca, nada, sem, nao (não); Italian non,
 * senza, niente; Dutch niet, geen, zonder. Not the words that also mean
 * something else in English or in the language itself (Spanish sin is the
 * sine, sin(x); French plus, personne; Italian mai).
 */
static const char *const negations =
    "not no never none nobody nothing nowhere neither nor without non "
    "nicht kein keine keinen keinem keiner keines nichts nie niemals niemand nirgends ohne weder "
    "ne pas jamais rien aucun aucune sans ni guere "
    "nunca jamas nada nadie ningun ninguno ninguna tampoco "
    "nao nenhum nenhuma ninguem sem senza niente nessuno nessuna "
    "niet geen nooit niets zonder nergens";

/* Units: groups separated by '|', first word canonical; '=' marks a bind-only alias. */
static const char *const units[] = {
    "km kilometer kilometers kilometre kilometres kms",
    "m meter meters metre metres",
    "cm centimeter centimeters centimetre centimetres",
    "mm millimeter millimeters millimetre",
    "mi mile miles",
    "ft foot feet",
    "inch inches",
    "yd yard yards",
    "kg kgs kilogram kilograms kilo kilos",
    "g gram grams",
    "lb lbs pound pounds",
    "oz ounce ounces",
    "l liter liters litre litres",
    "ml milliliter milliliters millilitre",
    "gal gallon gallons",
    "cup cups",
    "tbsp tablespoon tablespoons",
    "tsp teaspoon teaspoons",
    "c celsius centigrade",
    "f fahrenheit",
    "kelvin",
    "usd dollar dollars buck bucks",
    "eur euro euros",
    "gbp sterling quid",
    "jpy yen",
    "inr rupee rupees",
    "cny rmb yuan renminbi",
    "chf franc francs",
    "cad",
    "aud",
    "btc bitcoin bitcoins",
    "pct percent percentage",
    "kb kilobyte kilobytes",
    "mb megabyte megabytes",
    "gb gigabyte gigabytes",
    "tb terabyte terabytes",
    "mph",
    "kph kmh",
    "w watt watts",
    "kw kilowatt kilowatts",
    "kwh",
    "v volt volts",
    "hz hertz",
    "khz",
    "mhz",
    "ghz",
    "=am",
    "=pm",
    "@s =sec =secs =second =seconds",
    "@=min =mins =minute =minutes",
    "@h =hr =hrs =hour =hours",
    "@=day =days",
    "@=week =weeks",
    "@=month =months",
    "@=year =years =yr =yrs",
    "=st =nd =rd =th",
    "=hundred =hundreds",
    "=k =thousand =thousands",
    "=million =millions =mn",
    "=billion =billions =bn",
    "=trillion =trillions",
};
#define UNIT_MAG_MIN 57 /* hundred.. trillion are magnitudes */
#define UNIT_USD     22
#define UNIT_EUR     23
#define UNIT_GBP     24
#define UNIT_JPY     25
#define UNIT_INR     26
#define UNIT_PCT     32
#define UNIT_C       19
#define UNIT_F       20

static const char *const months = "january february march april may june july august september "
                                  "october november december";
static const char *const month_abbrevs = "jan feb _ apr _ jun jul aug sep oct nov dec";
static const char *const weekdays = "monday tuesday wednesday thursday friday saturday sunday";
/* When classes: words of one group mean the same time. */
static const char *const whens = "now currently current present presently latest newest recent "
                                 "recently nowadays|today|tonight|tomorrow|yesterday|weekend "
                                 "weekends";
static const char *const periods = "week month year quarter decade century season morning "
                                   "afternoon evening night";
static const char *const period_mods = "this next last past previous coming upcoming";
/* Question classes; "how" + many/much/long/old/often are added by the guard. */
static const char *const qwords = "who whom whose|when|where|why";
/* Members 0..4 are one class (towards), then from, than, before, after. */
static const char *const directions = "to into towards toward onto from than before after";
#define DIR_TO_LAST 4

/*
 * Groups of opposites and of mutually exclusive alternatives: two texts that
 * use different members of one group ask different things.
 */
static const char *const groups =
    "ascending descending|increase/increasing/raise decrease/decreasing/reduce|"
    "min/minimum max/maximum|buy/buying/buyer sell/selling/seller|"
    "good/better/best bad/worse/worst|cheap/cheaper/cheapest expensive/pricier/priciest|"
    "hot cold|warm cool|add/adds/added/adding remove/removes/removed/removing|encode decode|"
    "encrypt/encrypts/encrypted/encrypting/encryption "
    "decrypt/decrypts/decrypted/decrypting/decryption|"
    "compress decompress|zip unzip|enable/enables/enabled/enabling "
    "disable/disables/disabled/disabling|"
    "upload/uploads/uploaded/uploading download/downloads/downloaded/downloading|"
    "import/imports/imported/importing export/exports/exported/exporting|input output|"
    "formal informal|beginner/basic/novice expert/advanced|"
    "open close|start/starts/started/starting stop/stops/stopped/stopping|"
    "push/pushes/pushed/pushing pull/pulls/pulled/pulling|left right|up down|north/northern "
    "south/southern|"
    "east/eastern west/western|male female|man/men woman/women|boy girl|husband wife|"
    "father mother|son daughter|brother sister|king queen|true false|win/winner lose/loser|"
    "first last|before after|first second third fourth fifth sixth seventh eighth ninth tenth|"
    "more less/fewer|most least/fewest|high/higher/highest low/lower/lowest|"
    "large/larger/largest/big/bigger/biggest small/smaller/smallest|"
    "long/longer/longest short/shorter/shortest|old/older/oldest new/newer/newest|"
    "young/younger old/older|fast/faster/fastest slow/slower/slowest|"
    "easy/easier hard/harder/difficult|positive negative|light dark|heavy light|day night|"
    "morning evening|early/earlier/earliest late/later|rich poor|love hate|like dislike|"
    "agree disagree|accept/accepted reject/rejected|"
    "allow/allows/allowed/permit/permits/permitted "
    "deny/denies/denied/block/blocks/blocked/forbid/forbids/forbidden|"
    "grant/grants/granted revoke/revokes/revoked|mandatory/compulsory optional|taxable "
    "exempt/nontaxable|"
    "apply/applies/applied/applying remove/removes/removed/removing|"
    "include/includes/included/including exclude/excludes/excluded/excluding|inclusive exclusive|"
    "inside outside|internal external|public private|online offline|synonym antonym|"
    "mean median mode average|sum product difference quotient|derivative integral|"
    "differentiate integrate|multiply/multiplication divide/division|addition subtraction|"
    "plus minus|above below|over under|top bottom|front back|happy sad|success failure|"
    "safe dangerous/unsafe|legal illegal|healthy unhealthy|alive dead|"
    "summer winter autumn spring|install uninstall|lock unlock|mount unmount|"
    "serialize deserialize|send/sender receive/receiver|client server|read write|"
    "sync/synchronous async/asynchronous|static dynamic|stable unstable|sorted unsorted|"
    "absolute relative|horizontal/horizontally vertical/vertically|row column|width height|"
    "uppercase lowercase|upper lower|even odd|prefix suffix|inner outer|"
    "forward/forwards backward/backwards|pro con|advantage disadvantage|profit loss|"
    "credit debit|income expense|asset liability|borrow/borrower lend/lender|"
    "employer employee|teacher student|supply demand|inflation deflation|bull/bullish "
    "bear/bearish|pass fail|valid invalid|visible hidden|show hide|mac windows linux|"
    "android ios|chrome firefox safari|python java javascript ruby rust golang php perl kotlin "
    "swift scala haskell typescript|mysql postgres/postgresql sqlite mongodb redis|aws azure gcp|"
    "tcp udp|json yaml xml csv html markdown|jpeg/jpg png gif webp svg bmp|pdf docx|"
    "mp3 mp4 wav|english spanish french german italian portuguese chinese japanese korean russian "
    "arabic hindi dutch swedish polish turkish greek hebrew|nba nfl nhl mlb|"
    "dog cat|coffee tea|iphone android|sunrise sunset|breakfast lunch dinner|"
    "red blue green yellow black white brown grey/gray pink purple orange blond/blonde|"
    "he/him/his/himself she/her/hers/herself|"
    "monthly weekly daily yearly/annual|republican/republicans democrat/democrats";

/*
 * Opposite particles: groups separated by '|', the two sides of a group by
 * ' ', words of one side by '/' (the particles guard).
 */
static const char *const particles =
    "in/into/inside/within out/outside|on/onto off|up/upward/upwards down/downward/downwards|"
    "away back|to/towards/toward from|above/over below/under/beneath|"
    "forward/forwards backward/backwards|with without";

/* Prepositions of a relation (X in Y: direction pivots), then particles that are no relation. */
static const char *const relations = "in of on at by with for over under above below behind inside "
                                     "near around across against within along through";
static const char *const particles_only = "off out up down away into onto";

static const char *const be_forms = "is are was were am be been being";

/*
 * Words that undo or avoid what is asked (the intent guard; "instead of" is
 * read apart).
 */
static const char *const intents =
    "prevent prevents prevented preventing prevention avoid avoids avoided avoiding avoidance "
    "stop stops stopped stopping quit quits quitting undo undoes undid undone undoing cancel "
    "cancels cancelled canceled cancelling canceling cancellation disable disables disabled "
    "disabling fail fails failed failing refuse refuses refused refusing revert reverts reverted "
    "reverting";

/* Ranks (the rank guard). Not "first": "at first", "first spotted", "for the first time" rank
 * nothing. */
static const char *const ranks = "second third fourth fifth sixth seventh eighth ninth tenth last "
                                 "next previous penultimate nth";

/*
 * Quantity words: groups of alternatives separated by '|', the sides of a
 * group by ' ', words of one side by '/' (the quantity guard).
 */
static const char *const quantities =
    "all/every/each most many/numerous/lots/plenty some/several few|"
    "both either/neither/single/one|"
    "always usually/often/frequently sometimes/occasionally rarely/seldom|"
    "must can/could/may/might";

/*
 * Tenses of be and will, one group whose sides are now or then, and the
 * future (the dates guard: "who is the president" / "who will be the
 * president"). Past and present are one side: Quora's duplicates ask "who
 * is Martin Luther" as "who was Martin Luther", "what is" as "what was your
 * most embarrassing moment".
 */
static const char *const tenses = "is/are/am/was/were will";

#define LEX_MAX 4096

static struct lex lexicon[LEX_MAX];
static size_t nlex;
static char lex_words[32768];
static size_t lex_used;
static pthread_once_t lex_once = PTHREAD_ONCE_INIT;

static void lex_add(const char *w, size_t n, enum lex_cat cat, unsigned val, unsigned sub)
{
    if (nlex == LEX_MAX || lex_used + n + 1 > sizeof lex_words)
        abort(); /* the tables above outgrew the arrays: a build-time bug */
    char *copy = lex_words + lex_used;
    memcpy(copy, w, n);
    copy[n] = '\0';
    lex_used += n + 1;
    lexicon[nlex++] = (struct lex){copy, (uint8_t)cat, (uint8_t)sub, (uint16_t)val, 1};
}

/*
 * Add every word of s ('|' separates groups, ' ' members, '/' words of one
 * member): cat, with val = the group number (from 1) when numbered, else
 * val; sub = the member's index in its group.
 */
static void lex_add_words(const char *s, enum lex_cat cat, bool numbered, unsigned val)
{
    unsigned group = 1, member = 0;
    while (*s) {
        size_t n = strcspn(s, " |/");
        if (n > 0 && !(n == 1 && s[0] == '_'))
            lex_add(s, n, cat, numbered ? group : val, member);
        s += n;
        if (*s == '|') {
            group++;
            member = 0;
        } else if (*s == ' ') {
            member++;
        }
        if (*s)
            s++;
    }
}

static void lex_add_units(void)
{
    for (size_t u = 0; u < PC_ARRAY_LEN(units); u++) {
        const char *s = units[u];
        unsigned base = 0;
        if (*s == '@') {
            base |= U_TIME;
            s++;
        }
        while (*s) {
            unsigned f = base;
            if (*s == '=') {
                f |= U_BIND_ONLY;
                s++;
            }
            size_t n = strcspn(s, " ");
            if (n == 1)
                f |= U_BIND_ONLY | U_ATTACHED;
            lex_add(s, n, L_UNIT, (unsigned)u + 1, f);
            s += n;
            s += *s == ' ';
        }
    }
}

static int lex_cmp(const void *x, const void *y)
{
    const struct lex *a = x, *b = y;
    int c = strcmp(a->w, b->w);
    return c != 0 ? c : (int)a->cat - (int)b->cat;
}

/* The unit ids named by constants above must name the units they say. */
static void check_unit_ids(void)
{
    static const struct {
        unsigned id;
        const char *first;
    } ids[] = {{UNIT_USD, "usd "}, {UNIT_EUR, "eur "}, {UNIT_GBP, "gbp "},
               {UNIT_JPY, "jpy "}, {UNIT_INR, "inr "}, {UNIT_PCT, "pct "},
               {UNIT_C, "c "},     {UNIT_F, "f "},     {UNIT_MAG_MIN, "=hundred "}};
    for (size_t i = 0; i < PC_ARRAY_LEN(ids); i++)
        if (strncmp(units[ids[i].id - 1], ids[i].first, strlen(ids[i].first)) != 0)
            abort();
    _Static_assert(PC_ARRAY_LEN(units) < 64, "unit ids must fit a 64-bit mask");
}

static void lex_build(void)
{
    check_unit_ids();
    lex_add_words(function_words, L_FUNC, false, 0);
    lex_add_words(negations, L_NEG, false, 0);
    static const char *const numwords[] = {
        "zero",     "one",     "two",     "three",     "four",     "five",     "six",
        "seven",    "eight",   "nine",    "ten",       "eleven",   "twelve",   "thirteen",
        "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen", "twenty"};
    for (size_t i = 0; i < PC_ARRAY_LEN(numwords); i++)
        lex_add(numwords[i], strlen(numwords[i]), L_NUMWORD, (unsigned)i, 0);
    static const char *const tens[] = {"thirty",  "forty",  "fifty", "sixty",
                                       "seventy", "eighty", "ninety"};
    for (size_t i = 0; i < PC_ARRAY_LEN(tens); i++)
        lex_add(tens[i], strlen(tens[i]), L_NUMWORD, (unsigned)(30 + 10 * i), 0);
    lex_add("dozen", 5, L_NUMWORD, 12, 0);
    lex_add_units();
    char m[160];
    snprintf(m, sizeof m, "%s", months);
    for (char *p = m; *p; p++)
        *p = *p == ' ' ? '|' : *p;
    lex_add_words(m, L_MONTH, true, 0);
    snprintf(m, sizeof m, "%s", month_abbrevs);
    for (char *p = m; *p; p++)
        *p = *p == ' ' ? '|' : *p;
    lex_add_words(m, L_MONTH, true, 0);
    snprintf(m, sizeof m, "%s", weekdays);
    for (char *p = m; *p; p++)
        *p = *p == ' ' ? '|' : *p;
    lex_add_words(m, L_WEEKDAY, true, 0);
    lex_add_words(whens, L_WHEN, true, 0);
    lex_add_words(periods, L_PERIOD, false, 0);
    lex_add_words(period_mods, L_PMOD, false, 0);
    lex_add_words(qwords, L_QWORD, true, 0);
    lex_add_words(directions, L_DIR, false, 0);
    lex_add_words(groups, L_GROUP, true, 0);
    lex_add_words(particles, L_PART, true, 0);
    lex_add_words(relations, L_REL, false, 0);
    lex_add_words(particles_only, L_REL, false, 1);
    lex_add_words(be_forms, L_BE, false, 0);
    lex_add_words(intents, L_INTENT, false, 0);
    lex_add_words(ranks, L_RANK, false, 0);
    lex_add_words(quantities, L_QUANT, true, 0);
    lex_add_words(tenses, L_TENSE, true, 0);
    qsort(lexicon, nlex, sizeof lexicon[0], lex_cmp);
    for (size_t i = nlex - 1; i-- > 0;)
        if (strcmp(lexicon[i].w, lexicon[i + 1].w) == 0)
            lexicon[i].same = (uint16_t)(lexicon[i + 1].same + 1);
}

/* Index of the first lexicon entry for w, or -1. */
static int lex_find(const char *w)
{
    size_t lo = 0, hi = nlex;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (strcmp(lexicon[mid].w, w) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < nlex && strcmp(lexicon[lo].w, w) == 0 ? (int)lo : -1;
}

/* The lexicon entry of word w in category cat, or NULL. */
static const struct lex *lex_entry(const char *w, enum lex_cat cat)
{
    int k = lex_find(w);
    for (size_t j = (size_t)k; k >= 0 && j < (size_t)k + lexicon[k].same; j++)
        if (lexicon[j].cat == cat)
            return &lexicon[j];
    return NULL;
}

/* ---- a prepared text ---------------------------------------------------------- */

#define GSET_SIZE (2 * TEXT_MAX_TOKENS)

struct gdoc {
    const char *text; /* the caller's text, for what lies between tokens */
    size_t len;
    struct text_doc t;
    int16_t lex[TEXT_MAX_TOKENS];     /* first lexicon entry of the token, -1 = none */
    uint64_t h[TEXT_MAX_TOKENS];      /* hash of the singular form, never 0 */
    uint64_t set[GSET_SIZE];          /* the h[] values, open addressing, 0 = empty */
    int32_t wn[TEXT_MAX_TOKENS];      /* first WordNet form of the token, -1 = none */
    uint8_t wn_n[TEXT_MAX_TOKENS];    /* its WordNet forms (one per lemma) */
    uint16_t lemmas[TEXT_MAX_TOKENS]; /* the WordNet lemmas of the text, sorted, distinct */
    size_t nlemmas;
};

static void set_add(uint64_t *set, uint64_t h)
{
    size_t b = (size_t)(h % GSET_SIZE);
    while (set[b] != 0 && set[b] != h)
        b = (b + 1) % GSET_SIZE;
    set[b] = h;
}

static bool set_has(const uint64_t *set, uint64_t h)
{
    for (size_t b = (size_t)(h % GSET_SIZE); set[b] != 0; b = (b + 1) % GSET_SIZE)
        if (set[b] == h)
            return true;
    return false;
}

/* Token i's singular form (words) or the token itself into out; its length. */
static size_t singular_of(const struct text_doc *t, size_t i, char *out)
{
    size_t n = t->tok[i].len;
    if (t->tok[i].kind == TEXT_WORD)
        return text_singular(text_str(t, i), n, out);
    memcpy(out, text_str(t, i), n + 1);
    return n;
}

/* The first WordNet form spelled w (its entries follow it), or -1. */
static long wn_find(const char *w)
{
    size_t lo = 0, hi = wordnet_nforms;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (strcmp(wordnet_text + wordnet_forms[mid].off, w) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < wordnet_nforms && strcmp(wordnet_text + wordnet_forms[lo].off, w) == 0 ? (long)lo
                                                                                       : -1;
}

static int u16_cmp(const void *x, const void *y)
{
    return (int)*(const uint16_t *)x - (int)*(const uint16_t *)y;
}

static bool is_func(const struct gdoc *d, size_t i);
static void mark_letters(struct gdoc *d);

/* The WordNet forms of every token, and the text's set of lemmas. */
static void prepare_wordnet(struct gdoc *d)
{
    d->nlemmas = 0;
    for (size_t i = 0; i < d->t.n; i++) {
        /* function words are the lexicon's (all/some, more/less are groups there) */
        long f = d->t.tok[i].kind == TEXT_WORD && !is_func(d, i) ? wn_find(text_str(&d->t, i)) : -1;
        d->wn[i] = (int32_t)f;
        d->wn_n[i] = 0;
        for (long k = f; k >= 0 && (size_t)k < wordnet_nforms && d->wn_n[i] < UINT8_MAX &&
                         wordnet_forms[k].off == wordnet_forms[f].off;
             k++) {
            d->wn_n[i]++;
            if (d->nlemmas < TEXT_MAX_TOKENS)
                d->lemmas[d->nlemmas++] = wordnet_forms[k].lemma;
        }
    }
    qsort(d->lemmas, d->nlemmas, sizeof d->lemmas[0], u16_cmp);
    size_t k = 0;
    for (size_t i = 0; i < d->nlemmas; i++)
        if (k == 0 || d->lemmas[k - 1] != d->lemmas[i])
            d->lemmas[k++] = d->lemmas[i];
    d->nlemmas = k;
}

/* Tokenize s (capped like the embedders) and look every token up once. */
static void prepare(struct gdoc *d, const char *s, size_t len)
{
    d->text = s;
    d->len = len;
    text_tokenize_capped(&d->t, s, len, TEXT_MAX_READ);
    memset(d->set, 0, sizeof d->set);
    for (size_t i = 0; i < d->t.n; i++) {
        char sing[TEXT_TOK_MAX + 1];
        const char *w = text_str(&d->t, i);
        size_t n = singular_of(&d->t, i, sing);
        int k = lex_find(w);
        if (k < 0 && n != d->t.tok[i].len)
            k = lex_find(sing);
        d->lex[i] = (int16_t)k;
        d->h[i] = pc_fnv1a(PC_FNV_SEED, sing, n) | 1;
    }
    mark_letters(d);
    for (size_t i = 0; i < d->t.n; i++)
        set_add(d->set, d->h[i]);
    prepare_wordnet(d);
}

/* The lexicon entry of token i in category cat, or NULL. */
static const struct lex *lex_of(const struct gdoc *d, size_t i, enum lex_cat cat)
{
    int k = d->lex[i];
    if (k < 0)
        return NULL;
    for (size_t j = (size_t)k; j < (size_t)k + lexicon[k].same; j++)
        if (lexicon[j].cat == cat)
            return &lexicon[j];
    return NULL;
}

static bool is_func(const struct gdoc *d, size_t i)
{
    return lex_of(d, i, L_FUNC) != NULL;
}

/* The bytes between tokens i and i + 1 (empty when they share their raw text). */
static size_t gap(const struct gdoc *d, size_t i, const char **p)
{
    const struct text_tok *a = &d->t.tok[i], *b = &d->t.tok[i + 1];
    const char *end = a->raw + a->raw_len;
    *p = end;
    return b->raw > end ? (size_t)(b->raw - end) : 0;
}

/*
 * Words that never follow the article "a": a form of be or an auxiliary, a
 * preposition, a conjunction, a pronoun or determiner, a question word, an
 * operator read out. Not those that also name a thing ("a can", "a will",
 * "a must", "a being", "a for loop", "a down payment", "a do-while loop").
 */
static const char *const never_after_article[] = {
    "is",    "are",   "was",   "were",    "am",    "been",   "does", "did",   "has",  "have",
    "had",   "could", "would", "should",  "shall", "might",  "to",   "of",    "in",   "on",
    "at",    "by",    "from",  "into",    "than",  "with",   "over", "under", "and",  "or",
    "but",   "nor",   "if",    "then",    "else",  "so",     "not",  "i",     "me",   "my",
    "we",    "us",    "our",   "you",     "your",  "he",     "him",  "his",   "she",  "her",
    "they",  "them",  "their", "it",      "its",   "a",      "an",   "the",   "this", "these",
    "those", "what",  "which", "who",     "whom",  "whose",  "when", "where", "why",  "how",
    "minus", "plus",  "times", "divided", "mod",   "modulo", "xor",  "equals"};

/* Whether bytes g[0..n) hold nothing but white space and what opens a word ("a 'string'"). */
static bool opens_word(const char *g, size_t n)
{
    for (size_t k = 0; k < n; k++)
        if (strchr(" \t\r\n'\"`([{*_", g[k]) == NULL || g[k] == '\0')
            return false;
    return true;
}

/* Whether the bytes between tokens i and i + 1 open a word (opens_word); *n their count. */
static bool gap_opens_word(const struct gdoc *d, size_t i, size_t *n)
{
    const char *g = NULL;
    *n = gap(d, i, &g);
    return opens_word(g, *n);
}

/*
 * "a" is the article when a word (or a number: "a 10% raise") of its
 * sentence follows it, written after it with nothing but white space or an
 * opening quote, that can start a noun phrase. Otherwise it is the letter,
 * a variable or a name ("if a < b", "check if a is less than b", "b minus
 * a", "is A a subset of B", "get an A in math"): a content word, never
 * matched by the article of the other text (another hash).
 */
static void mark_letters(struct gdoc *d)
{
    for (size_t i = 0; i < d->t.n; i++) {
        if (d->t.tok[i].kind != TEXT_WORD || !text_is(&d->t, i, "a"))
            continue;
        const char *g = NULL;
        size_t gn = i + 1 < d->t.n ? gap(d, i, &g) : 0;
        bool article = i + 1 < d->t.n && !(d->t.tok[i + 1].flags & TEXT_F_START) &&
                       (d->t.tok[i + 1].kind == TEXT_WORD || d->t.tok[i + 1].kind == TEXT_NUM) &&
                       opens_word(g, gn);
        for (size_t k = 0; article && k < PC_ARRAY_LEN(never_after_article); k++)
            article = !text_is(&d->t, i + 1, never_after_article[k]);
        if (article)
            continue;
        d->lex[i] = -1;
        d->h[i] = pc_fnv1a(PC_FNV_SEED, "a\x01", 2) | 1;
    }
}

/* ---- numbers -------------------------------------------------------------------- */

/* A number, or a word that starts with one ("5km", "1st"). */
static bool tok_is_number(const struct gdoc *d, size_t i)
{
    const struct text_tok *t = &d->t.tok[i];
    return t->kind == TEXT_NUM ||
           (t->kind == TEXT_WORD && text_str(&d->t, i)[0] >= '0' && text_str(&d->t, i)[0] <= '9');
}

#define QTY_MAX 64

struct qty {
    char v[24];   /* canonical digits */
    uint8_t unit; /* unit id or 0 */
    uint8_t mag;  /* magnitude unit id or 0 */
    uint8_t rel;  /* the word before: 1 "by" (a change), 2 "to" (a target), 0 other */
};

struct qtys {
    struct qty q[QTY_MAX];
    size_t n;
    uint64_t mentioned; /* bit per unit id named anywhere (not bind-only ones) */
};

static const struct lex *unit_lex(const char *w, size_t n)
{
    char buf[TEXT_TOK_MAX + 1];
    if (n == 0 || n > TEXT_TOK_MAX)
        return NULL;
    memcpy(buf, w, n);
    buf[n] = '\0';
    int k = lex_find(buf);
    for (size_t j = (size_t)k; k >= 0 && j < (size_t)k + lexicon[k].same; j++)
        if (lexicon[j].cat == L_UNIT)
            return &lexicon[j];
    return NULL;
}

static void qty_set_unit(struct qty *q, unsigned u)
{
    if (u >= UNIT_MAG_MIN && q->mag == 0)
        q->mag = (uint8_t)u;
    else if (u < UNIT_MAG_MIN && q->unit == 0)
        q->unit = (uint8_t)u;
}

/* Currency symbol just before p (in d's text): its unit id, or 0. */
static unsigned currency_before(const struct gdoc *d, const char *p)
{
    static const struct {
        const char *sym;
        unsigned unit;
    } syms[] = {{"$", UNIT_USD},
                {"\xe2\x82\xac", UNIT_EUR},
                {"\xc2\xa3", UNIT_GBP},
                {"\xc2\xa5", UNIT_JPY},
                {"\xe2\x82\xb9", UNIT_INR}};
    for (int space = 0; space < 2; space++) {
        if (space && !(p > d->text && p[-1] == ' '))
            break;
        const char *at = p - space;
        for (size_t i = 0; i < PC_ARRAY_LEN(syms); i++) {
            size_t n = strlen(syms[i].sym);
            if (at - d->text >= (ptrdiff_t)n && memcmp(at - n, syms[i].sym, n) == 0)
                return syms[i].unit;
        }
    }
    return 0;
}

/*
 * The currency whose symbol follows a number ending at end, written against it
 * or after one space ("100€", "1000 $"); 0 when none.
 */
static unsigned currency_after(const struct gdoc *d, const char *end)
{
    const char *stop = d->text + d->len;
    if (end < stop && *end == ' ')
        end++;
    if (end < stop && (*end == '$' || (unsigned char)*end >= 0x80)) {
        const char *next = end + 1;
        while (next < stop && ((unsigned char)*next & 0xc0) == 0x80)
            next++;
        /* the symbol stands alone: "100 $" or "100$?", not "100 $x" */
        if (next == stop || !((*next >= 'a' && *next <= 'z') || (*next >= 'A' && *next <= 'Z') ||
                              (*next >= '0' && *next <= '9')))
            return currency_before(d, next);
    }
    return 0;
}

/* Units written after token i: '%', then up to two unit words (magnitude, unit). */
static void units_after(const struct gdoc *d, size_t i, struct qty *q)
{
    const struct text_tok *t = &d->t.tok[i];
    const char *end = t->raw + t->raw_len;
    if (end < d->text + d->len && *end == '%')
        qty_set_unit(q, UNIT_PCT);
    for (size_t j = i; j + 1 < d->t.n && j < i + 2; j++) {
        const char *g;
        size_t gn = gap(d, j, &g);
        bool degree = gn == 2 && memcmp(g, "\xc2\xb0", 2) == 0;
        bool spaces = gn <= 8;
        for (size_t k = 0; spaces && k < gn; k++) /* within the gap: the text has no NUL */
            spaces = g[k] == ' ' || g[k] == '\t' || g[k] == '\n' || g[k] == '-';
        const struct lex *u = lex_of(d, j + 1, L_UNIT);
        if (u == NULL || !(spaces || degree) || ((u->sub & U_ATTACHED) && gn > 0 && !degree))
            return;
        qty_set_unit(q, u->val);
    }
}

/* A canonical number: leading zeros of the integer part dropped. */
static void canon_number(const char *s, size_t n, char *out, size_t cap)
{
    while (n > 1 && s[0] == '0' && s[1] != '.') {
        s++;
        n--;
    }
    snprintf(out, cap, "%.*s", (int)PC_MIN(n, cap - 1), s);
}

static struct qty *qty_new(struct qtys *qs)
{
    if (qs->n == QTY_MAX)
        return NULL;
    struct qty *q = &qs->q[qs->n++];
    memset(q, 0, sizeof *q);
    return q;
}

/*
 * Whether token i is written negative: a '-' or minus sign right before it
 * that is not a joiner ("-5", "(-5)", "= -5", but not "5-2" or "COVID-19"),
 * or the word minus or negative before it when no number precedes that
 * ("minus 5", but not "7 minus 5").
 */
static bool negative_at(const struct gdoc *d, size_t i)
{
    const char *p = d->t.tok[i].raw;
    size_t before = (size_t)(p - d->text), sign = 0;
    if (before >= 1 && p[-1] == '-')
        sign = 1;
    else if (before >= 3 && memcmp(p - 3, "\xe2\x88\x92", 3) == 0)
        sign = 3;
    if (sign > 0) {
        if (before == sign)
            return true;
        unsigned char c = (unsigned char)p[-1 - (long)sign];
        return !((c >= '0' && c <= '9') || ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') || c == ')' ||
                 c == ']' || c == '.' || c >= 0x80);
    }
    return i > 0 && (text_is(&d->t, i - 1, "minus") || text_is(&d->t, i - 1, "negative")) &&
           !(i > 1 && tok_is_number(d, i - 2));
}

/* Digit runs inside a word ("5km", "iphone16", "1st"), with an attached unit suffix. */
static void word_numbers(const struct gdoc *d, size_t i, struct qtys *qs)
{
    const char *w = text_str(&d->t, i);
    size_t n = d->t.tok[i].len;
    for (size_t p = 0; p < n;) {
        if (w[p] < '0' || w[p] > '9') {
            p++;
            continue;
        }
        size_t s = p;
        while (p < n && ((w[p] >= '0' && w[p] <= '9') || w[p] == '.'))
            p++;
        struct qty *q = qty_new(qs);
        if (q == NULL)
            return;
        bool neg = s == 0 && negative_at(d, i);
        q->v[0] = '-';
        canon_number(w + s, p - s, q->v + neg, sizeof q->v - neg);
        size_t a = p;
        while (p < n && (w[p] < '0' || w[p] > '9'))
            p++;
        const struct lex *u = s == 0 ? unit_lex(w + a, p - a) : NULL;
        if (u != NULL)
            qty_set_unit(q, u->val);
        if (s == 0 && p == n)
            units_after(d, i, q);
        unsigned cur = s == 0 ? currency_before(d, d->t.tok[i].raw) : 0;
        if (cur != 0)
            qty_set_unit(q, cur);
    }
}

static void numbers_of(const struct gdoc *d, struct qtys *qs)
{
    memset(qs, 0, sizeof *qs);
    for (size_t i = 0; i < d->t.n; i++) {
        const struct text_tok *t = &d->t.tok[i];
        const struct lex *u = lex_of(d, i, L_UNIT);
        if (u != NULL && !(u->sub & U_BIND_ONLY))
            qs->mentioned |= UINT64_C(1) << u->val;
        const struct lex *nw = lex_of(d, i, L_NUMWORD);
        if (t->kind == TEXT_WORD && (t->flags & TEXT_F_DIGIT)) {
            word_numbers(d, i, qs);
            continue;
        }
        if (t->kind != TEXT_NUM && nw == NULL)
            continue;
        bool one = nw != NULL && nw->val == 1;
        struct qty *q = qty_new(qs);
        if (q == NULL)
            return;
        bool neg = negative_at(d, i);
        q->v[0] = '-';
        if (nw != NULL)
            snprintf(q->v + neg, sizeof q->v - neg, "%u", nw->val);
        else
            canon_number(text_str(&d->t, i), t->len, q->v + neg, sizeof q->v - neg);
        units_after(d, i, q);
        if (i > 0)
            q->rel = text_is(&d->t, i - 1, "by") ? 1 : text_is(&d->t, i - 1, "to") ? 2 : 0;
        unsigned cur = currency_before(d, t->raw);
        if (cur == 0)
            cur = currency_after(d, t->raw + t->raw_len);
        if (cur != 0)
            qty_set_unit(q, cur);
        if (one && q->unit == 0 && q->mag == 0)
            qs->n--; /* "one" alone is rarely a number ("which one") */
    }
}

/* Units bound to numbers count as named too ("5km" names km like "kilometers" does). */
static void mention_bound(struct qtys *qs)
{
    for (size_t i = 0; i < qs->n; i++)
        if (qs->q[i].unit != 0)
            qs->mentioned |= UINT64_C(1) << qs->q[i].unit;
}

static int qty_cmp(const void *x, const void *y)
{
    const struct qty *a = x, *b = y;
    int c = strcmp(a->v, b->v);
    if (c != 0)
        return c;
    return a->unit != b->unit ? (int)a->unit - (int)b->unit : (int)a->mag - (int)b->mag;
}

static bool guard_numbers(const struct gdoc *a, const struct gdoc *b)
{
    struct qtys qa, qb;
    numbers_of(a, &qa);
    numbers_of(b, &qb);
    mention_bound(&qa);
    mention_bound(&qb);
    if (qa.n != qb.n || qa.mentioned != qb.mentioned)
        return true;
    qsort(qa.q, qa.n, sizeof qa.q[0], qty_cmp);
    qsort(qb.q, qb.n, sizeof qb.q[0], qty_cmp);
    for (size_t i = 0; i < qa.n; i++)
        if (qty_cmp(&qa.q[i], &qb.q[i]) != 0)
            return true;
    /* the same number as a change in one text and a target in the other ("increase by 5%" /
     * "increase to 5%") */
    for (size_t i = 0; i < qa.n; i++)
        if (qa.q[i].rel != 0 && qb.q[i].rel != 0 && qa.q[i].rel != qb.q[i].rel)
            return true;
    return false;
}

/* ---- negation ------------------------------------------------------------------- */

static size_t negations_of(const struct gdoc *d)
{
    size_t n = 0;
    for (size_t i = 0; i < d->t.n; i++)
        n += lex_of(d, i, L_NEG) != NULL;
    return n;
}

static bool opposite_lemmas(const struct gdoc *a, const struct gdoc *b, int kind);

/* One more negation on one side than on the other. */
static bool negated_once(const struct gdoc *a, const struct gdoc *b)
{
    size_t na = negations_of(a), nb = negations_of(b);
    return na + 1 == nb || nb + 1 == na;
}

/* WordNet's opposites (antonyms or negating affixes) of one text in the other. */
static bool opposites(const struct gdoc *a, const struct gdoc *b)
{
    return opposite_lemmas(a, b, WN_ANTONYM) || opposite_lemmas(a, b, WN_NEGATION);
}

/*
 * A different number of negations, unless one negation turns a word into
 * the opposite the other text uses ("is it unsafe" / "is it not safe",
 * "a closed door" / "a door that is not open").
 */
static bool guard_negation(const struct gdoc *a, const struct gdoc *b)
{
    return negations_of(a) != negations_of(b) && !(negated_once(a, b) && opposites(a, b));
}

/* ---- entities --------------------------------------------------------------------- */

/*
 * A unit: a single letter is one only after a number ("100 W", "5 m", "20 C"); alone it is a
 * letter, an initial or a name ("George W. Bush" / "George H. Bush", "the letter m", "the F
 * key", "vitamin C"), which the entities, extra and swap guards compare. Not a letter glued to
 * the word before ("I´m", an acute accent for an apostrophe): a piece of that word.
 */
static bool unit_word(const struct gdoc *d, size_t i)
{
    if (lex_of(d, i, L_UNIT) == NULL)
        return false;
    size_t gn = 0;
    return d->t.tok[i].len > 1 ||
           (i > 0 && (tok_is_number(d, i - 1) || lex_of(d, i - 1, L_NUMWORD) != NULL ||
                      !gap_opens_word(d, i - 1, &gn) || gn == 0));
}

/* A token written like a name: capitalised inside a sentence, all caps or mixed case. */
static bool entity_like(const struct gdoc *d, size_t i)
{
    const struct text_tok *t = &d->t.tok[i];
    if (t->kind != TEXT_WORD || !(t->flags & TEXT_F_ALPHA) || (t->flags & TEXT_F_SYNTH))
        return false;
    bool cased = (t->flags & (TEXT_F_ALLCAPS | TEXT_F_MIXED)) ||
                 ((t->flags & TEXT_F_CAP) && !(t->flags & TEXT_F_START));
    if (!cased || is_func(d, i) || unit_word(d, i) || lex_of(d, i, L_MONTH) != NULL ||
        lex_of(d, i, L_WEEKDAY) != NULL)
        return false;
    return !(t->flags & TEXT_F_DIGIT) || t->len > 2; /* "5K" is a number */
}

/* Damerau-Levenshtein distance of at most one (equal strings included). */
static bool one_edit(const char *a, size_t an, const char *b, size_t bn)
{
    if (an > bn + 1 || bn > an + 1)
        return false;
    size_t i = 0;
    while (i < an && i < bn && a[i] == b[i])
        i++;
    if (i == an || i == bn)
        return true; /* equal or one appended */
    if (an == bn)
        return strcmp(a + i + 1, b + i + 1) == 0 ||
               (i + 1 < an && a[i] == b[i + 1] && a[i + 1] == b[i] &&
                memcmp(a + i + 2, b + i + 2, an - i - 2) == 0);
    return an > bn ? memcmp(a + i + 1, b + i, an - i - 1) == 0
                   : memcmp(a + i, b + i + 1, bn - i - 1) == 0;
}

/* Whether token i of d appears in o: same singular form, or one typo away (5+ letters). */
static bool appears_in(const struct gdoc *d, size_t i, const struct gdoc *o)
{
    if (set_has(o->set, d->h[i]))
        return true;
    const char *w = text_str(&d->t, i);
    size_t n = d->t.tok[i].len;
    if (n < 4)
        return false;
    for (size_t j = 0; j < o->t.n; j++) {
        size_t m = o->t.tok[j].len;
        if (m >= 4 && PC_MAX(n, m) >= 5 && one_edit(w, n, text_str(&o->t, j), m))
            return true;
    }
    return false;
}

/*
 * A number with a unit or an ordinal ending written against it ("100km",
 * "10am", "16GB", "1080p", "12th"): the numbers guard's, and "100 km" says
 * the same.
 */
static bool number_with_suffix(const struct gdoc *d, size_t i)
{
    const char *w = text_str(&d->t, i);
    size_t n = d->t.tok[i].len, k = 0;
    while (k < n && ((w[k] >= '0' && w[k] <= '9') || w[k] == '.' || w[k] == ','))
        k++;
    if (k == 0 || k == n)
        return false;
    for (size_t j = k; j < n; j++)
        if (!(w[j] >= 'a' && w[j] <= 'z'))
            return false;
    static const char *const endings[] = {"st", "nd", "rd", "th", "p", "k", "x", "s", "d"};
    char suffix[TEXT_TOK_MAX + 1];
    memcpy(suffix, w + k, n - k);
    suffix[n - k] = '\0';
    for (size_t j = 0; j < PC_ARRAY_LEN(endings); j++)
        if (strcmp(suffix, endings[j]) == 0)
            return true;
    return lex_entry(suffix, L_UNIT) != NULL;
}

/*
 * A token written like code or an id: letters and digits mixed ("a1b2c3d",
 * "0xdeadbeef", "sha256"), or camelCase ("getUser", "readFile"). One letter changes what it names,
 * so it must appear as it is (case aside), no typo allowed: "setUser" is not "getUser".
 */
static bool code_like(const struct gdoc *d, size_t i)
{
    const struct text_tok *t = &d->t.tok[i];
    if (t->kind != TEXT_WORD || (t->flags & TEXT_F_SYNTH) || t->len < 4)
        return false;
    if ((t->flags & TEXT_F_DIGIT) && (t->flags & TEXT_F_ALPHA))
        return lex_of(d, i, L_UNIT) == NULL && !number_with_suffix(d, i);
    if (!(t->flags & TEXT_F_MIXED))
        return false;
    /* camelCase: lower case first, a capital from the third letter on; not a brand (iPhone,
     * YouTube: typos of those stay allowed) */
    const char *w = t->raw;
    if (!(w[0] >= 'a' && w[0] <= 'z'))
        return false;
    for (size_t k = 2; k < t->raw_len; k++)
        if (w[k] >= 'A' && w[k] <= 'Z')
            return true;
    return false;
}

/*
 * Whether o has token i of d as written, case aside, or with a plural s
 * written in lower case ("CPU" / "CPUs"); no other singular form: "HTTPS"
 * is not "HTTP".
 */
static bool written_in(const struct gdoc *d, size_t i, const struct gdoc *o)
{
    size_t n = d->t.tok[i].len;
    for (size_t j = 0; j < o->t.n; j++) {
        const struct text_tok *t = &o->t.tok[j];
        if ((t->len == n || (t->len == n + 1 && t->raw[t->raw_len - 1] == 's')) &&
            memcmp(text_str(&o->t, j), text_str(&d->t, i), n) == 0)
            return true;
    }
    return false;
}

/* Nine words in ten of d in capitals: shouting, not acronyms ("HE COULD NOT BELEIVE"). */
static bool shouting(const struct gdoc *d)
{
    size_t words = 0, caps = 0;
    for (size_t i = 0; i < d->t.n; i++) {
        const struct text_tok *t = &d->t.tok[i];
        if (t->kind != TEXT_WORD || !(t->flags & TEXT_F_ALPHA))
            continue;
        words++;
        bool lower = false; /* "I" and "O." count as capitals too */
        for (size_t k = 0; k < t->raw_len && !lower; k++)
            lower = t->raw[k] >= 'a' && t->raw[k] <= 'z';
        caps += !lower;
    }
    return words >= 3 && 10 * caps >= 9 * words;
}

/*
 * A name of d that o lacks, typos allowed; code, ids and acronyms (all
 * capitals, where the text does not shout) exactly: "HTTP" is not "HTTPS".
 */
static bool has_unmatched_entity(const struct gdoc *d, const struct gdoc *o)
{
    size_t checked = 0;
    bool loud = shouting(d) || shouting(o);
    for (size_t i = 0; i < d->t.n && checked < 64; i++) {
        bool code = code_like(d, i);
        bool keyword = !loud && (d->t.tok[i].flags & TEXT_F_ALLCAPS) && is_func(d, i) &&
                       !(d->t.tok[i].flags & TEXT_F_SYNTH); /* UNION ALL, IS NOT NULL */
        if (!code && !keyword && !entity_like(d, i))
            continue;
        checked++;
        bool exact = code || (!loud && (d->t.tok[i].flags & TEXT_F_ALLCAPS));
        if (exact ? !written_in(d, i, o) : !appears_in(d, i, o))
            return true;
    }
    return false;
}

static bool guard_entities(const struct gdoc *a, const struct gdoc *b)
{
    return has_unmatched_entity(a, b) || has_unmatched_entity(b, a);
}

/* ---- antonyms and alternatives -------------------------------------------------------- */

#define GROUPS_MAX 64

struct group_use {
    uint16_t group;
    uint32_t members; /* bit per member index */
};

static size_t groups_of(const struct gdoc *d, struct group_use *g)
{
    size_t n = 0;
    for (size_t i = 0; i < d->t.n; i++) {
        int k = d->lex[i];
        if (k < 0)
            continue;
        for (size_t j = (size_t)k; j < (size_t)k + lexicon[k].same; j++) {
            if (lexicon[j].cat != L_GROUP)
                continue;
            size_t x = 0;
            while (x < n && g[x].group != lexicon[j].val)
                x++;
            if (x == n && n == GROUPS_MAX)
                continue;
            if (x == n)
                g[n++] = (struct group_use){lexicon[j].val, 0};
            g[x].members |= 1u << (lexicon[j].sub & 31);
        }
    }
    return n;
}

/* Both texts use a group and not the same members of it. */
static bool guard_antonyms(const struct gdoc *a, const struct gdoc *b)
{
    struct group_use ga[GROUPS_MAX], gb[GROUPS_MAX];
    size_t na = groups_of(a, ga), nb = groups_of(b, gb);
    for (size_t i = 0; i < na; i++)
        for (size_t j = 0; j < nb; j++)
            if (ga[i].group == gb[j].group && ga[i].members != gb[j].members)
                return true;
    return false;
}

/* ---- dates ------------------------------------------------------------------------------ */

#define DATES_MAX 32

/* Date features as small integers: kind << 8 | value. */
enum date_kind { D_MONTH = 1, D_WEEKDAY, D_WHEN, D_PERIOD, D_YEAR, D_RATE };

/*
 * Periods of a rate ("per day", "every week", "twice a month", "daily"):
 * the index + 1 of the period (the dates guard: "3 times per day" / "3 times
 * per week").
 */
static const char *const rate_periods[] = {"second", "minute", "hour",   "day",    "week",
                                           "month",  "year",   "decade", "century"};
static const char *const rate_adverbs[] = {"_",      "_",       "hourly", "daily",
                                           "weekly", "monthly", "yearly"};

static unsigned rate_at(const struct gdoc *d, size_t i)
{
    for (size_t k = 0; k < PC_ARRAY_LEN(rate_adverbs); k++)
        if (text_is(&d->t, i, rate_adverbs[k]))
            return (unsigned)k + 1;
    if (text_is(&d->t, i, "annually") || text_is(&d->t, i, "annual"))
        return 7;
    if (i == 0)
        return 0;
    bool a = text_is(&d->t, i - 1, "a") || text_is(&d->t, i - 1, "an");
    if (a) { /* "3 times a day", "$50 an hour"; not "wait a second", "have a minute" */
        if (i < 2 || !(tok_is_number(d, i - 2) || lex_of(d, i - 2, L_NUMWORD) != NULL ||
                       text_is(&d->t, i - 2, "times") || text_is(&d->t, i - 2, "once") ||
                       text_is(&d->t, i - 2, "twice")))
            return 0;
    } else if (!(text_is(&d->t, i - 1, "per") || text_is(&d->t, i - 1, "every") ||
                 text_is(&d->t, i - 1, "each"))) {
        return 0;
    }
    char one[TEXT_TOK_MAX + 1];
    one[singular_of(&d->t, i, one)] = '\0';
    for (size_t k = 0; k < PC_ARRAY_LEN(rate_periods); k++)
        if (strcmp(one, rate_periods[k]) == 0)
            return (unsigned)k + 1;
    return 0;
}

static bool number_near(const struct gdoc *d, size_t i)
{
    return (i > 0 && d->t.tok[i - 1].kind == TEXT_NUM) ||
           (i + 1 < d->t.n && d->t.tok[i + 1].kind == TEXT_NUM);
}

/* A month name; "may" and "march" count only capitalised or next to a number. */
static bool month_at(const struct gdoc *d, size_t i, const struct lex *m)
{
    if (m == NULL)
        return false;
    const struct text_tok *t = &d->t.tok[i];
    bool ambiguous = text_is(&d->t, i, "may") || text_is(&d->t, i, "march");
    return !ambiguous || number_near(d, i) ||
           ((t->flags & TEXT_F_CAP) && !(t->flags & TEXT_F_START));
}

static unsigned date_feature(const struct gdoc *d, size_t i)
{
    const struct lex *l;
    if (month_at(d, i, lex_of(d, i, L_MONTH)))
        return D_MONTH << 8 | lex_of(d, i, L_MONTH)->val;
    if ((l = lex_of(d, i, L_WEEKDAY)) != NULL)
        return D_WEEKDAY << 8 | l->val;
    if ((l = lex_of(d, i, L_WHEN)) != NULL)
        return D_WHEN << 8 | l->val;
    if (lex_of(d, i, L_PMOD) != NULL && i + 1 < d->t.n && lex_of(d, i + 1, L_PERIOD) != NULL) {
        unsigned m = lex_of(d, i, L_PMOD)->sub, p = lex_of(d, i + 1, L_PERIOD)->sub;
        return D_PERIOD << 8 | (m & 0xf) << 4 | (p & 0xf);
    }
    unsigned rate = rate_at(d, i);
    if (rate != 0)
        return D_RATE << 8 | rate;
    const struct text_tok *t = &d->t.tok[i];
    if (t->kind == TEXT_NUM && t->len == 4) {
        const char *s = text_str(&d->t, i);
        if ((s[0] == '1' && s[1] == '9') || (s[0] == '2' && s[1] == '0'))
            return D_YEAR << 8 | (unsigned)((s[2] - '0') * 10 + (s[3] - '0'));
    }
    return 0;
}

static int uint_cmp(const void *x, const void *y)
{
    unsigned a = *(const unsigned *)x, b = *(const unsigned *)y;
    return a < b ? -1 : a > b;
}

static int u32_cmp(const void *x, const void *y)
{
    uint32_t a = *(const uint32_t *)x, b = *(const uint32_t *)y;
    return a < b ? -1 : a > b;
}

static int long_cmp(const void *x, const void *y)
{
    long a = *(const long *)x, b = *(const long *)y;
    return (a > b) - (a < b);
}

static int u64_cmp(const void *x, const void *y)
{
    uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;
    return a < b ? -1 : a > b;
}

/* Sorted, distinct date features of d into f; returns the count. */
static size_t dates_of(const struct gdoc *d, unsigned *f)
{
    size_t n = 0;
    for (size_t i = 0; i < d->t.n && n < DATES_MAX; i++) {
        unsigned x = date_feature(d, i);
        if (x != 0)
            f[n++] = x;
    }
    qsort(f, n, sizeof *f, uint_cmp);
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (k == 0 || f[k - 1] != f[i])
            f[k++] = f[i];
    return k;
}

static bool slots_differ(const struct gdoc *a, const struct gdoc *b, enum lex_cat cat);
static unsigned questions_of(const struct gdoc *d);

/* A question: a question mark or a question word. */
static bool is_question(const struct gdoc *d)
{
    return memchr(d->text, '?', d->len) != NULL || questions_of(d) != 0;
}

/*
 * The date features differ (rates only when both texts give one: "3 times
 * per day" / "3 times per week", but "how do I use time each day" / "how do
 * I use time" pass); or two questions ask in one place, one of them
 * of the future and the other not ("who will be the president" / "who is
 * the president"). Only questions: a statement of a rule says the same in
 * either tense ("the format will remain" / "the format remains").
 */
static bool guard_dates(const struct gdoc *a, const struct gdoc *b)
{
    unsigned fa[DATES_MAX], fb[DATES_MAX];
    size_t na = dates_of(a, fa), nb = dates_of(b, fb);
    /* rates sort last (D_RATE is the highest kind); they count only when both texts give one */
    size_t ra = 0, rb = 0;
    while (ra < na && fa[na - 1 - ra] >> 8 == D_RATE)
        ra++;
    while (rb < nb && fb[nb - 1 - rb] >> 8 == D_RATE)
        rb++;
    if (ra > 0 && rb > 0 && (ra != rb || memcmp(fa + na - ra, fb + nb - rb, ra * sizeof *fa) != 0))
        return true;
    na -= ra;
    nb -= rb;
    if (na != nb || memcmp(fa, fb, na * sizeof *fa) != 0)
        return true;
    return is_question(a) && is_question(b) && slots_differ(a, b, L_TENSE);
}

/* ---- length ---------------------------------------------------------------------------- */

#define LENGTH_RATIO 2.5 /* (content words + 1) of one text over the other's */

static size_t content_words(const struct gdoc *d)
{
    size_t n = 0;
    for (size_t i = 0; i < d->t.n; i++)
        n += !is_func(d, i) && !(d->t.tok[i].flags & (TEXT_F_SYNTH | TEXT_F_FILLER));
    return n;
}

static bool guard_length(const struct gdoc *a, const struct gdoc *b)
{
    double na = (double)content_words(a) + 1, nb = (double)content_words(b) + 1;
    return na > LENGTH_RATIO * nb || nb > LENGTH_RATIO * na;
}

/* ---- direction ------------------------------------------------------------------------- */

#define DIR_MAX   64
#define DIR_REACH 2 /* content words looked at on each side of a pivot */

/*
 * "u is before the pivot, v after it". Pivots are the direction words
 * (class: to/into/arrows, from, than, before or after) and the prepositions
 * of a relation (X in Y, X of Y, X on Y...: the word itself). Facts are
 * made of the content words nearest each side: the two nearest, plus each
 * of them with the second word on the other side ("convert ethanol to
 * ethanoic acid": ethanol|ethanoic, ethanol|acid, convert|ethanoic). The
 * roles around a verb are compared apart (roles_swapped: "the turtle is
 * following the fish" / "the fish is following the turtle").
 */
struct dir_fact {
    uint64_t word; /* a direction class, or PIVOT_WORD | the pivot's hash */
    uint64_t u, v;
};

#define PIVOT_WORD (UINT64_C(1) << 63)

static bool is_be(const struct gdoc *d, size_t i)
{
    return lex_of(d, i, L_BE) != NULL;
}

static bool ing_word(const struct gdoc *d, size_t i)
{
    const struct text_tok *t = &d->t.tok[i];
    const char *w = text_str(&d->t, i);
    return t->kind == TEXT_WORD && t->len >= 5 && memcmp(w + t->len - 3, "ing", 3) == 0 &&
           !text_is(&d->t, i, "being");
}

/*
 * A verb in the progressive: an -ing word after a form of be, one word
 * between at most ("is quickly running"), or after "and" that follows one
 * in the same sentence ("is wearing a hat and dancing").
 */
static bool progressive_at(const struct gdoc *d, size_t i)
{
    if (!ing_word(d, i))
        return false;
    if ((i >= 1 && is_be(d, i - 1)) || (i >= 2 && is_be(d, i - 2) && !is_func(d, i - 1)))
        return true;
    if (i < 2 || !(text_is(&d->t, i - 1, "and") || text_is(&d->t, i - 1, "or")))
        return false;
    for (size_t j = i - 1; j-- > 0;) {
        if (ing_word(d, j) && ((j >= 1 && is_be(d, j - 1)) || (j >= 2 && is_be(d, j - 2))))
            return true;
        if (d->t.tok[j].flags & TEXT_F_START)
            break;
    }
    return false;
}

/*
 * Function words that also name a thing, and determiners before a noun. Read
 * as requests or fillers ("list the files", "the best way to"), they are no
 * content; after a determiner or a content word ("convert a list to a
 * tuple", "python list to tuple", "move the top to the thing") they are the
 * thing itself, which the order around a pivot or a verb is about.
 */
static const char *const func_nouns[] = {"list", "lists", "thing", "things", "way", "ways",
                                         "top",  "use",   "show",  "lot",    "lots"};
static const char *const determiners[] = {"a",     "an",    "the",  "this",  "that",   "these",
                                          "those", "my",    "your", "his",   "her",    "its",
                                          "our",   "their", "each", "every", "another"};

static bool word_in(const struct gdoc *d, size_t i, const char *const *w, size_t n);

/* Whether token i is content for the order of words: a content word, or a function word naming a
 * thing after a determiner or a content word. */
static bool order_word(const struct gdoc *d, size_t i)
{
    if (!is_func(d, i))
        return true;
    size_t gn = 0;
    if (i == 0 || (d->t.tok[i].flags & TEXT_F_START) || !gap_opens_word(d, i - 1, &gn) ||
        !word_in(d, i, func_nouns, PC_ARRAY_LEN(func_nouns)))
        return false;
    return word_in(d, i - 1, determiners, PC_ARRAY_LEN(determiners)) ||
           (d->t.tok[i - 1].kind == TEXT_WORD && !is_func(d, i - 1) &&
            !(d->t.tok[i - 1].flags & TEXT_F_FILLER));
}

/* The pivot of token i that is no direction word (a relation): PIVOT_WORD | hash, or 0. */
static uint64_t pivot_of(const struct gdoc *d, size_t i)
{
    const struct lex *l = lex_of(d, i, L_REL);
    if ((d->t.tok[i].flags & TEXT_F_FILLER) || l == NULL || l->val != 0)
        return 0;
    return PIVOT_WORD | d->h[i];
}

static bool clause_gap(const struct gdoc *d, size_t i, bool semi);

/*
 * Up to DIR_REACH content words from i stepping by step, stopping at another
 * direction word or at a sentence start, and with comma at a comma too (a
 * relation does not reach across "in Japan, what...").
 */
static size_t content_side(const struct gdoc *d, long i, long step, bool comma, uint64_t *out)
{
    size_t n = 0;
    for (; i >= 0 && i < (long)d->t.n && n < DIR_REACH; i += step) {
        const struct text_tok *t = &d->t.tok[i];
        if (lex_of(d, (size_t)i, L_DIR) != NULL)
            break;
        if (order_word(d, (size_t)i) && !(t->flags & TEXT_F_FILLER))
            out[n++] = d->h[i];
        if ((t->flags & TEXT_F_START) && step < 0)
            break;
        if (step > 0 && i + 1 < (long)d->t.n && (d->t.tok[i + 1].flags & TEXT_F_START))
            break;
        if (comma && ((step < 0 && i > 0 && clause_gap(d, (size_t)i - 1, false)) ||
                      (step > 0 && clause_gap(d, (size_t)i, false))))
            break;
    }
    return n;
}

static bool is_arrow(const char *g, size_t n)
{
    static const char *const arrows[] = {"->", "=>", "\xe2\x86\x92", "\xe2\x87\x92"};
    for (size_t i = 0; i < PC_ARRAY_LEN(arrows); i++)
        if (n <= 8 && memmem(g, n, arrows[i], strlen(arrows[i])) != NULL)
            return true;
    return false;
}

static size_t add_facts(struct dir_fact *f, uint64_t word, const uint64_t *l, size_t nl,
                        const uint64_t *r, size_t nr)
{
    size_t n = 0;
    for (size_t i = 0; i < nl; i++)
        for (size_t j = 0; j < nr; j++)
            if ((i == 0 || j == 0) && l[i] != r[j])
                f[n++] = (struct dir_fact){word, l[i], r[j]};
    return n;
}

/* The facts of every pivot of d (at most 3 * DIR_MAX). */
static size_t directions_of(const struct gdoc *d, struct dir_fact *f)
{
    size_t n = 0, uses = 0;
    for (size_t i = 0; i < d->t.n && uses < DIR_MAX; i++) {
        const char *g = NULL;
        size_t gn = i + 1 < d->t.n ? gap(d, i, &g) : 0;
        const struct lex *l = lex_of(d, i, L_DIR);
        bool arrow = gn > 0 && is_arrow(g, gn);
        uint64_t word = l != NULL && l->sub > DIR_TO_LAST ? l->sub : 0; /* to, into, arrows */
        uint64_t left[DIR_REACH], right[DIR_REACH];
        size_t nl, nr;
        if (l != NULL || arrow) {
            nl = content_side(d, l != NULL ? (long)i - 1 : (long)i, -1, false, left);
            nr = content_side(d, (long)i + 1, 1, false, right);
            n += add_facts(f + n, word, left, nl, right, nr);
            uses++;
        }
        if (l == NULL && uses < DIR_MAX && (word = pivot_of(d, i)) != 0) {
            bool cut = (d->t.tok[i].flags & TEXT_F_START) || (i > 0 && clause_gap(d, i - 1, false));
            nl = cut ? 0 : content_side(d, (long)i - 1, -1, true, left);
            nr = clause_gap(d, i, false) ? 0 : content_side(d, (long)i + 1, 1, true, right);
            n += add_facts(f + n, word, left, nl, right, nr);
            uses++;
        }
    }
    return n;
}

static bool has_fact(const struct dir_fact *f, size_t n, uint64_t word, uint64_t u, uint64_t v)
{
    for (size_t i = 0; i < n; i++)
        if (f[i].word == word && f[i].u == u && f[i].v == v)
            return true;
    return false;
}

/* ---- roles around a verb ---- */

static bool word_in(const struct gdoc *d, size_t i, const char *const *w, size_t n)
{
    for (size_t k = 0; k < n; k++)
        if (text_is(&d->t, i, w[k]))
            return true;
    return false;
}

static const char *const coordinators[] = {"and", "or", "but", "while", "whereas"};
static const char *const relatives[] = {"which", "who", "whom", "that"};

/* Whether a comma or semicolon (only a semicolon: semi) lies between tokens i and i + 1. */
static bool clause_gap(const struct gdoc *d, size_t i, bool semi)
{
    const char *g;
    size_t n = i + 1 < d->t.n ? gap(d, i, &g) : 0;
    return n > 0 && ((!semi && memchr(g, ',', n) != NULL) || memchr(g, ';', n) != NULL);
}

static bool is_relation(const struct gdoc *d, size_t i)
{
    return lex_of(d, i, L_REL) != NULL || lex_of(d, i, L_DIR) != NULL;
}

/* A word that can head a role: content, no preposition, no -ly adverb. */
static bool role_content(const struct gdoc *d, size_t i)
{
    const struct text_tok *t = &d->t.tok[i];
    const char *w = text_str(&d->t, i);
    if (t->kind != TEXT_WORD || (t->flags & TEXT_F_FILLER) || is_func(d, i) || is_relation(d, i))
        return false;
    return !(t->len >= 5 && w[t->len - 2] == 'l' && w[t->len - 1] == 'y');
}

/* A role: the run of role words [from, to) of a clause; its head is the last. */
struct role {
    size_t from, to;
};

/* The run of role words that starts at i (i < to). */
static struct role run_at(const struct gdoc *d, size_t i, size_t to)
{
    size_t e = i + 1;
    while (e < to && role_content(d, e))
        e++;
    return (struct role){i, e};
}

/*
 * Whether a clause starts at token k (scanning back towards a subject): a
 * sentence start; after a semicolon; a coordinator or relative word that
 * opens a new subject ("and a man is", "where a man is"; not "black and
 * white" or "that is cute"); a comma, unless what follows it is a relative
 * clause ("a dog, which is black, is").
 */
static bool subject_starts(const struct gdoc *d, size_t k)
{
    static const char *const wh[] = {"where", "when", "which", "who", "that", "whom"};
    static const char *const det[] = {"a",   "an",  "the",   "this", "these", "those", "his",
                                      "her", "its", "their", "my",   "your",  "our",   "some",
                                      "i",   "you", "he",    "she",  "it",    "we",    "they"};
    if ((d->t.tok[k].flags & TEXT_F_START) || k == 0 || clause_gap(d, k - 1, true))
        return true;
    bool opens = word_in(d, k, det, PC_ARRAY_LEN(det));
    if (opens && word_in(d, k - 1, wh, PC_ARRAY_LEN(wh)))
        return true; /* "a podium is where a man is speaking" */
    if (opens && word_in(d, k - 1, coordinators, PC_ARRAY_LEN(coordinators)))
        for (size_t j = k - 1; j-- > 0 && !(d->t.tok[j + 1].flags & TEXT_F_START);)
            if (is_be(d, j))
                return true; /* "a woman is dancing and a man is" (not "with X and a Y is") */
    return clause_gap(d, k - 1, false) && !word_in(d, k, relatives, PC_ARRAY_LEN(relatives)) &&
           !is_relation(d, k);
}

/* A passive ("is being held by", "was worn by"): the roles are named the other way round. */
static bool has_passive(const struct gdoc *d)
{
    for (size_t i = 2; i < d->t.n; i++)
        if (text_is(&d->t, i, "by") && (is_be(d, i - 2) || (i >= 3 && is_be(d, i - 3))))
            return true;
    return false;
}

/*
 * The subject of the progressive verb at v: the first run of role words of
 * its clause ("a nude lady at the..." -> nude lady; "a panda that is cute
 * is" -> panda; "four young men are" -> four young men). Not a list ("a man
 * and a woman are...", which may name them in any order). from == to when
 * there is none.
 */
static struct role subject_of(const struct gdoc *d, size_t v)
{
    struct role none = {0, 0};
    static const char *const finite[] = {"is", "are", "was", "were", "am"};
    size_t aux = is_be(d, v - 1) ? v - 1 : v - 2;
    if (text_is(&d->t, aux, "being") && aux > 0)
        aux--; /* "is being chased" */
    if (!word_in(d, aux, finite, PC_ARRAY_LEN(finite)))
        return none; /* "will the bullet be going": the subject is not before be */
    size_t from = aux;
    while (from > 0 && !subject_starts(d, from))
        from--;
    for (size_t k = from; k < aux; k++)
        if (word_in(d, k, coordinators, PC_ARRAY_LEN(coordinators)))
            return none;
    while (from < aux && !role_content(d, from))
        from++;
    return from < aux ? run_at(d, from, aux) : none;
}

/*
 * The direct object of the verb at v: the run of role words that follows
 * it, when no preposition comes first ("playing an acoustic guitar" ->
 * acoustic guitar; "running behind its prey" -> none).
 */
static struct role object_of(const struct gdoc *d, size_t v)
{
    struct role none = {0, 0};
    size_t to = v + 1;
    while (to < d->t.n && !(d->t.tok[to].flags & TEXT_F_START) && !clause_gap(d, to - 1, false) &&
           !word_in(d, to, coordinators, PC_ARRAY_LEN(coordinators)) &&
           !word_in(d, to, relatives, PC_ARRAY_LEN(relatives)))
        to++;
    size_t i = v + 1;
    while (i < to && !role_content(d, i) && !is_relation(d, i))
        i++;
    return i < to && role_content(d, i) ? run_at(d, i, to) : none;
}

static bool role_has(const struct gdoc *d, struct role r, uint64_t h)
{
    for (size_t i = r.from; i < r.to; i++)
        if (d->h[i] == h)
            return true;
    return false;
}

/*
 * Two texts fill one role with different heads, each of which the other
 * text has elsewhere: the roles were exchanged ("a nude lady is walking in
 * front of a crowd" / "a nude crowd is walking in front of a lady"). A role
 * whose head the other role has is one thing described two ways ("a sunny
 * day" / "a day full of sun").
 */
static bool role_moved(const struct gdoc *a, struct role x, const struct gdoc *b, struct role y)
{
    if (x.from == x.to || y.from == y.to)
        return false;
    uint64_t hx = a->h[x.to - 1], hy = b->h[y.to - 1];
    if (role_has(b, y, hx) || role_has(a, x, hy))
        return false;
    return set_has(a->set, hy) && set_has(b->set, hx);
}

/* The token of d that is a progressive verb with hash h, if exactly one; -1 otherwise. */
static long only_verb(const struct gdoc *d, uint64_t h)
{
    long at = -1;
    for (size_t i = 0; i < d->t.n; i++)
        if (d->h[i] == h && progressive_at(d, i)) {
            if (at >= 0)
                return -1;
            at = (long)i;
        }
    return at;
}

static bool token_is_lemma(const struct gdoc *d, size_t i, uint16_t x);

/*
 * A passive participle in the progressive: the word after "being" ("is being chased"). Not an
 * -ing word ("is being annoying"), which progressive_at takes for the active verb: the one
 * token was both voices, and a text differed from itself.
 */
static bool participle_at(const struct gdoc *d, size_t i)
{
    return i >= 2 && text_is(&d->t, i - 1, "being") && d->t.tok[i].kind == TEXT_WORD &&
           !is_func(d, i) && d->wn[i] >= 0 && !ing_word(d, i);
}

/* The verb at v is in a relative clause ("a horse that is pulling"): its subject is not found. */
static bool in_relative(const struct gdoc *d, size_t v)
{
    for (size_t k = v; k-- > 0 && k + 3 >= v;)
        if (word_in(d, k, relatives, PC_ARRAY_LEN(relatives)))
            return true;
    return false;
}

/* Whether token i of a and token j of b are forms of one WordNet lemma (chased, chasing). */
static bool same_lemma(const struct gdoc *a, size_t i, const struct gdoc *b, size_t j)
{
    for (int k = 0; a->wn[i] >= 0 && k < a->wn_n[i]; k++)
        if (b->wn[j] >= 0 && token_is_lemma(b, j, wordnet_forms[a->wn[i] + k].lemma))
            return true;
    return false;
}

/*
 * The head of the agent of the participle at i ("chased by the big dog":
 * dog; "handed balls by a woman": woman), or 0.
 */
static uint64_t agent_of(const struct gdoc *d, size_t i)
{
    size_t k = i + 1;
    while (k < d->t.n && k <= i + 4 && !text_is(&d->t, k, "by") && !clause_gap(d, k - 1, false) &&
           !(d->t.tok[k].flags & TEXT_F_START))
        k++;
    if (k >= d->t.n || !text_is(&d->t, k, "by"))
        return 0;
    k++;
    while (k < d->t.n && !role_content(d, k) && !is_relation(d, k))
        k++;
    if (k >= d->t.n || !role_content(d, k))
        return 0;
    struct role r = run_at(d, k, d->t.n);
    return d->h[r.to - 1];
}

/*
 * One subject is acted on in a and acts in b, by the same verb: "a dog is
 * being chased" / "a dog is chasing a ball". Not when a names b's subject
 * as the agent too ("a woman is being handed balls by another woman" /
 * "one woman is handing balls to another woman"); who acts on whom is the
 * same when the subjects differ ("a dog is being chased by a cat" / "a cat
 * is chasing a dog").
 */
static bool voice_flipped(const struct gdoc *a, const struct gdoc *b)
{
    for (size_t i = 0; i < a->t.n; i++) {
        if (!participle_at(a, i) || in_relative(a, i))
            continue;
        struct role sa = subject_of(a, i);
        if (sa.from == sa.to)
            continue;
        uint64_t by = agent_of(a, i);
        for (size_t j = 0; j < b->t.n; j++) {
            if (!progressive_at(b, j) || !same_lemma(a, i, b, j) || in_relative(b, j))
                continue;
            struct role sb = subject_of(b, j);
            if (sb.from != sb.to && a->h[sa.to - 1] == b->h[sb.to - 1] && by != b->h[sb.to - 1])
                return true;
        }
    }
    return false;
}

/*
 * Roles reassigned around a verb both texts use once: the content word
 * nearest it on one side differs, and each text has the other's word too
 * ("the turtle is following the fish" / "the fish is following the turtle";
 * "a woman is playing the keyboard and a man is dancing" / "a woman is
 * dancing and a man is playing the keyboard").
 */
static bool roles_swapped(const struct gdoc *a, const struct gdoc *b)
{
    if (has_passive(a) || has_passive(b))
        return false;
    for (size_t i = 0; i < a->t.n; i++) {
        if (!progressive_at(a, i) || only_verb(a, a->h[i]) != (long)i)
            continue;
        long j = only_verb(b, a->h[i]);
        if (j < 0)
            continue;
        if (role_moved(a, subject_of(a, i), b, subject_of(b, (size_t)j)) ||
            role_moved(a, object_of(a, i), b, object_of(b, (size_t)j)))
            return true;
    }
    return false;
}

/* Words that join two things the same way round (X and Y, X like Y, X similar to Y). */
static const char *const symmetric[] = {"and",     "or",      "nor",        "vs",       "versus",
                                        "with",    "between", "like",       "similar",  "same",
                                        "equal",   "equals",  "equivalent", "compared", "comparing",
                                        "compare", "differ",  "different",  "related",  "married"};

static size_t question_start(const struct gdoc *d);

/*
 * Whether token i is written as a possessive ("father's", "parents'", the
 * same with a typographic apostrophe): it owns what follows, one way round
 * ("my father's brother" / "my brother's father").
 */
static bool possessive(const struct gdoc *d, size_t i)
{
    const struct text_tok *t = &d->t.tok[i];
    const char *r = t->raw;
    size_t n = t->raw_len;
    if (t->kind != TEXT_WORD || n < 2 || (i + 1 < d->t.n && d->t.tok[i + 1].raw == r))
        return false; /* "don't": its parts share the raw word */
    return (r[n - 2] == '\'' && (r[n - 1] == 's' || r[n - 1] == 'S')) || r[n - 1] == '\'' ||
           (n >= 4 && memcmp(r + n - 4, "\xe2\x80\x99", 3) == 0 &&
            (r[n - 1] == 's' || r[n - 1] == 'S')) ||
           (n >= 3 && memcmp(r + n - 3, "\xe2\x80\x99", 3) == 0);
}

/*
 * Two words trade places and nothing else changes, with a word between them
 * (an article aside) that joins them one way round: "did Germany beat
 * Brazil" / "did Brazil beat Germany", "does Microsoft own GitHub", "the
 * tests pass locally but fail in CI" / "the tests fail locally but pass in
 * CI". Not around a word that joins them either way round ("Python and
 * Java" / "Java and Python", "x equals y"), nor next to each other
 * ("quickly running" / "running quickly"). In a question that opens with a
 * form of be, the subject and what it is said to be trade places with only
 * an article or none between them ("is a dolphin a fish" / "is a fish a
 * dolphin", "are all squares rectangles" / "are all rectangles squares"):
 * being one thing is no symmetric relation, so that counts too (not across
 * a comma: "is it red, blue" lists). A possessive owns the word after it,
 * so two words traded next to each other count too ("my father's brother"
 * / "my brother's father").
 */
static bool two_words_traded(const struct gdoc *a, const struct gdoc *b)
{
    if (a->t.n != b->t.n)
        return false;
    size_t at[3], n = 0;
    for (size_t k = 0; k < a->t.n; k++)
        if (a->h[k] != b->h[k]) {
            if (n == 2)
                return false;
            at[n++] = k;
        }
    /* each word content where it stands in one of the texts ("python list to tuple": list) */
    if (n != 2 || a->h[at[0]] != b->h[at[1]] || a->h[at[1]] != b->h[at[0]] ||
        !(order_word(a, at[0]) || order_word(b, at[1])) ||
        !(order_word(a, at[1]) || order_word(b, at[0])))
        return false;
    size_t q = question_start(a);
    bool joined = possessive(a, at[0]), copular = q < at[0] && is_be(a, q);
    for (size_t k = at[0] + 1; k < at[1]; k++) {
        if (word_in(a, k, symmetric, PC_ARRAY_LEN(symmetric)))
            return false;
        joined |= !text_is(&a->t, k, "the") && !text_is(&a->t, k, "a") && !text_is(&a->t, k, "an");
    }
    for (size_t k = at[0]; k < at[1]; k++)
        copular &= !clause_gap(a, k, false);
    return joined || copular;
}

/*
 * A subject acted on in a and acting in b, unless a text says both ("the dog is being chased.
 * The dog is chasing a ball."): then the other text saying one of them is no flip, and a text
 * compared with itself would differ.
 */
static bool voice_flip(const struct gdoc *a, const struct gdoc *b)
{
    return voice_flipped(a, b) && !voice_flipped(a, a) && !voice_flipped(b, b);
}

/* "u to v" only in one text and "v to u" only in the other. */
static bool guard_direction(const struct gdoc *a, const struct gdoc *b)
{
    if (roles_swapped(a, b) || two_words_traded(a, b) || voice_flip(a, b) || voice_flip(b, a))
        return true;
    struct dir_fact *fa = pc_malloc(2 * 3 * DIR_MAX * sizeof *fa), *fb = fa + 3 * DIR_MAX;
    size_t na = directions_of(a, fa), nb = directions_of(b, fb);
    bool reversed = false;
    for (size_t i = 0; i < na && !reversed; i++) {
        const struct dir_fact *x = &fa[i];
        reversed = has_fact(fb, nb, x->word, x->v, x->u) &&
                   !has_fact(fa, na, x->word, x->v, x->u) && !has_fact(fb, nb, x->word, x->u, x->v);
    }
    free(fa);
    return reversed;
}

/* ---- question words --------------------------------------------------------------------- */

#define Q_HOW_MANY 5  /* how many / how much; then long, old, often */
#define Q_OPEN     9  /* what, which, how (the way to): one open kind */
#define Q_YESNO    10 /* starts with an auxiliary verb: is, can, should... */

static unsigned how_kind(const struct gdoc *d, size_t i)
{
    static const char *const how[] = {"many", "much", "long", "old", "often"};
    for (size_t k = 0; i + 1 < d->t.n && k < PC_ARRAY_LEN(how); k++)
        if (text_is(&d->t, i + 1, how[k]))
            return Q_HOW_MANY + (k == 0 ? 0 : (unsigned)k - 1);
    return Q_OPEN;
}

static bool is_auxiliary(const struct gdoc *d, size_t i)
{
    static const char *const aux[] = {"is",  "are",   "was",   "were",   "am",    "do",   "does",
                                      "did", "can",   "could", "should", "would", "will", "shall",
                                      "may", "might", "must",  "has",    "have",  "had"};
    for (size_t k = 0; k < PC_ARRAY_LEN(aux); k++)
        if (text_is(&d->t, i, aux[k]))
            return true;
    return false;
}

static size_t first_word(const struct gdoc *d)
{
    size_t i = 0;
    while (i < d->t.n && (d->t.tok[i].flags & TEXT_F_FILLER))
        i++;
    return i;
}

/*
 * Where the question starts: at the first word, or after a phrase put in
 * front that opens with a preposition and ends in a comma ("On Facebook, is
 * there a way...?").
 */
static size_t question_start(const struct gdoc *d)
{
    size_t i = first_word(d);
    if (i >= d->t.n || lex_of(d, i, L_REL) == NULL)
        return i;
    for (size_t k = i; k + 1 < d->t.n && k < i + 8; k++) {
        if (d->t.tok[k + 1].flags & TEXT_F_START)
            break;
        if (clause_gap(d, k, false))
            return k + 1;
    }
    return i;
}

/*
 * The question word that token i misspells ("whre", "whcih"): a word of
 * four letters or more that no word list knows, one typo from one. NULL
 * when there is none.
 */
static const char *qword_typo(const struct gdoc *d, size_t i)
{
    static const char *const qw[] = {"whom", "whose", "when", "where", "what", "which"};
    const struct text_tok *t = &d->t.tok[i];
    if (t->kind != TEXT_WORD || t->len < 4 || d->lex[i] >= 0 || d->wn[i] >= 0)
        return NULL;
    for (size_t k = 0; k < PC_ARRAY_LEN(qw); k++)
        if (one_edit(text_str(&d->t, i), t->len, qw[k], strlen(qw[k])))
            return qw[k];
    return NULL;
}

/*
 * Bit per kind of question asked: who, when, where, why (1..4), how many
 * or much, how long, how old, how often (5..8), open (9: what, which, how)
 * and yes/no (10: the question starts with an auxiliary verb).
 */
static unsigned questions_of(const struct gdoc *d)
{
    unsigned m = 0;
    size_t first = question_start(d);
    if (first < d->t.n && is_auxiliary(d, first))
        m |= 1u << Q_YESNO;
    for (size_t i = 0; i < d->t.n; i++) {
        const struct lex *q = lex_of(d, i, L_QWORD);
        const char *typo = q == NULL ? qword_typo(d, i) : NULL;
        if (typo != NULL)
            q = lex_entry(typo, L_QWORD);
        if (q != NULL)
            m |= 1u << q->val;
        else if (text_is(&d->t, i, "how"))
            m |= 1u << how_kind(d, i);
        else if (text_is(&d->t, i, "what") || text_is(&d->t, i, "which") ||
                 (typo != NULL && (typo[2] == 'a' || typo[2] == 'i')))
            m |= 1u << Q_OPEN;
    }
    return m;
}

static bool is_subject_pronoun(const struct gdoc *d, size_t i)
{
    static const char *const p[] = {"i",  "you",  "he",   "she",  "it",
                                    "we", "they", "this", "that", "there"};
    return i < d->t.n && word_in(d, i, p, PC_ARRAY_LEN(p));
}

/*
 * q asks yes or no ("are we cool", an auxiliary then a pronoun) and s
 * states it ("we are cool": no question mark, the same pronoun first).
 */
static bool asks_what_other_states(const struct gdoc *q, const struct gdoc *s)
{
    size_t i = first_word(q), j = first_word(s);
    if (i + 1 >= q->t.n || j >= s->t.n || !is_auxiliary(q, i) || !is_subject_pronoun(q, i + 1) ||
        s->t.tok[j].len != q->t.tok[i + 1].len || !text_is(&s->t, j, text_str(&q->t, i + 1)))
        return false;
    return memchr(s->text, '?', s->len) == NULL && questions_of(s) == 0;
}

/*
 * A statement: no question mark, no question word, and a verb after its
 * first word (a form of be or an auxiliary: "the fraction is 40%"). A
 * keyword query ("capital of France") or a request ("tell me...") is none.
 */
static bool is_statement(const struct gdoc *s)
{
    if (memchr(s->text, '?', s->len) != NULL || questions_of(s) != 0)
        return false;
    for (size_t i = first_word(s) + 1; i < s->t.n; i++)
        if (is_be(s, i) || is_auxiliary(s, i))
            return true;
    return false;
}

/*
 * q asks an open question (who, what, how many... and a question mark: a
 * question word alone may open a clause, "when set, it...") and s states
 * something instead.
 */
static bool asks_open_other_states(const struct gdoc *q, const struct gdoc *s)
{
    return memchr(q->text, '?', q->len) != NULL && (questions_of(q) & ~(1u << Q_YESNO)) != 0 &&
           is_statement(s);
}

/*
 * Both texts ask a question, and not the same kinds; or one asks what the
 * other states (yes or no: "are we cool" / "we are cool"; open: "what was
 * the ejection fraction?" / "the ejection fraction is 40%").
 */
static bool guard_question(const struct gdoc *a, const struct gdoc *b)
{
    unsigned qa = questions_of(a), qb = questions_of(b);
    if (qa != 0 && qb != 0 && qa != qb)
        return true;
    return asks_what_other_states(a, b) || asks_what_other_states(b, a) ||
           asks_open_other_states(a, b) || asks_open_other_states(b, a);
}

/* ---- extra words ------------------------------------------------------------------------ */

/* A word no other guard owns: not a number, unit, date or function word. */
static bool is_content(const struct gdoc *d, size_t i)
{
    const struct text_tok *t = &d->t.tok[i];
    if (t->kind == TEXT_NUM || (t->flags & (TEXT_F_SYNTH | TEXT_F_FILLER | TEXT_F_DIGIT)))
        return false;
    static const enum lex_cat owned[] = {L_FUNC, L_NUMWORD, L_MONTH, L_WEEKDAY, L_WHEN};
    for (size_t k = 0; k < PC_ARRAY_LEN(owned); k++)
        if (lex_of(d, i, owned[k]) != NULL)
            return false;
    return !unit_word(d, i);
}

static bool has_unmatched_word(const struct gdoc *d, const struct gdoc *o)
{
    for (size_t i = 0; i < d->t.n; i++)
        if (is_content(d, i) && !appears_in(d, i, o))
            return true;
    return false;
}

/* One text covers every content word of the other and adds some of its own. */
static bool guard_extra(const struct gdoc *a, const struct gdoc *b)
{
    return has_unmatched_word(a, b) != has_unmatched_word(b, a);
}

#define SWAP_MAX 1 /* more unmatched words than this on a side: a rewording (tuned: 1 beats 2) */

/*
 * Token i repeats the word two before it across a preposition: one word said
 * twice in an idiom ("line by line", "end-to-end", "face to face", "day after
 * day"), which replaces one word ("line by line" / "word by word", "end-to-end"
 * / "point-to-point encryption", "integration" / "end-to-end tests").
 */
static bool reduplicated(const struct gdoc *d, size_t i)
{
    static const char *const joins[] = {"by", "to", "for", "on", "after", "upon", "over", "in"};
    return i >= 2 && d->h[i] == d->h[i - 2] && word_in(d, i - 1, joins, PC_ARRAY_LEN(joins));
}

/*
 * The content words of d that o lacks (up to stop of them), a reduplicated one once: their
 * count, the first in *first.
 */
static size_t unmatched_words(const struct gdoc *d, const struct gdoc *o, size_t stop,
                              size_t *first)
{
    size_t n = 0;
    for (size_t i = 0; i < d->t.n && n < stop; i++)
        if (is_content(d, i) && !appears_in(d, i, o) && !reduplicated(d, i) && n++ == 0)
            *first = i;
    return n;
}

/*
 * The one place where two texts of the same words in the same order hold
 * different content words, both found elsewhere in the other text ("if (a <
 * b) return a;" / "if (a < b) return b;", "the table | a | b |: the sum of
 * column a" / "... of column b"): its index, or -1.
 */
static long replaced_in_place(const struct gdoc *a, const struct gdoc *b)
{
    if (a->t.n != b->t.n)
        return -1;
    long at = -1;
    for (size_t k = 0; k < a->t.n; k++) {
        if (a->h[k] == b->h[k])
            continue;
        if (at >= 0)
            return -1;
        at = (long)k;
    }
    return at >= 0 && is_content(a, (size_t)at) && is_content(b, (size_t)at) ? at : -1;
}

static bool words_alike(const struct gdoc *a, size_t i, const struct gdoc *b, size_t j);

/*
 * Both texts have a few content words the other lacks, and everything else
 * in common: a word replaced ("best pizza in Rome" / "cheapest pizza in
 * Rome"), unless WordNet says the two can name one thing ("kids" /
 * "children", "slicing" / "cutting"). More changes than SWAP_MAX on a side
 * is a rewording, left to the similarity.
 */
static bool guard_swap(const struct gdoc *a, const struct gdoc *b)
{
    size_t ia = 0, ib = 0;
    size_t na = unmatched_words(a, b, SWAP_MAX + 1, &ia);
    size_t nb = unmatched_words(b, a, SWAP_MAX + 1, &ib);
    long k = na == 0 && nb == 0 ? replaced_in_place(a, b) : -1;
    if (k >= 0)
        return !words_alike(a, (size_t)k, b, (size_t)k);
    if (na == 0 || nb == 0 || na > SWAP_MAX || nb > SWAP_MAX)
        return false;
    return !(na == 1 && nb == 1 && words_alike(a, ia, b, ib));
}

/* ---- symbols ------------------------------------------------------------------------------ */

/*
 * What lies between the tokens: operators, signs, paths, code. Each gap
 * between two tokens (and before the first, after the last) gives at most
 * one feature: its meaningful symbols, with the token on each side they are
 * bound to. Symbols written against a token bind to it ("-5": a sign bound
 * to 5; "5!": bound to 5); symbols written against both or against neither
 * ("3+3", "x > 5") bind to both, so "1/2" and "2/1" differ. Prose
 * punctuation carries no meaning here: quotes, brackets, commas and
 * semicolons, sentence ends (. ? ! : followed by a space), joiners between
 * words (self-learn, iPhone/Android, R&D, U.S.), currency, percent and degree
 * signs next to a number (the numbers guard reads those) and arrows (the
 * direction guard's). Two texts whose features differ ask different things.
 */

#define SYM_MAX       128 /* features kept per text; the rest are summed */
#define SYM_PIECE_MAX 64  /* code points of one gap examined one by one; the rest are hashed */

struct syms {
    uint64_t f[SYM_MAX];
    size_t n;      /* features kept */
    size_t total;  /* all features */
    uint64_t more; /* sum of the features past SYM_MAX */
};

/* One code point of s[0..n) (n >= 1): its value (-1 if invalid) and length. */
static size_t utf8_cp(const char *s, size_t n, long *cp)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t k = u[0] < 0x80 ? 1 : (u[0] & 0xe0) == 0xc0 ? 2 : (u[0] & 0xf0) == 0xe0 ? 3 : 4;
    if (k > n || (u[0] >= 0x80 && u[0] < 0xc0)) {
        *cp = -1;
        return 1;
    }
    long v = k == 1 ? u[0] : k == 2 ? (u[0] & 0x1f) : k == 3 ? (u[0] & 0x0f) : (u[0] & 0x07);
    for (size_t i = 1; i < k; i++) {
        if ((u[i] & 0xc0) != 0x80) {
            *cp = -1;
            return 1;
        }
        v = v << 6 | (u[i] & 0x3f);
    }
    *cp = v;
    return k;
}

static bool sym_space(long c)
{
    return c == ' ' || (c >= '\t' && c <= '\r') || c == 0xa0 || (c >= 0x2000 && c <= 0x200a) ||
           c == 0x202f || c == 0x205f || c == 0x3000;
}

/* Characters that never carry meaning between tokens (quotes, brackets, commas...). */
static bool sym_noise(long c)
{
    static const long noise[] = {
        '"',    '\'',   '`',    '(',    ')',    '[',    ']',    '{',    '}',    ',',    ';',
        0xab,   0xbb,   0xb4,   0xad,   0xbf,   0xa1,   0x2014, 0x2015, 0x2018, 0x2019, 0x201a,
        0x201b, 0x201c, 0x201d, 0x201e, 0x2022, 0x2039, 0x203a, 0x2060, 0x3001, 0x300c, 0x300d,
        0x300e, 0x300f, 0x3010, 0x3011, 0xfeff, 0xff08, 0xff09, 0xff0c, 0xff1b,
    };
    if ((c >= 0x200b && c <= 0x200d) || (c >= 0x2600 && c <= 0x27bf) ||
        (c >= 0x1f000 && c <= 0x1faff) || (c >= 0xfe00 && c <= 0xfe0f))
        return true; /* zero-width marks; emoji and dingbats decorate ("🤗 Datasets") */
    for (size_t i = 0; i < PC_ARRAY_LEN(noise); i++)
        if (noise[i] == c)
            return true;
    return false;
}

/* Sentence ends: noise when nothing is written right after them. */
static bool sym_stop(long c)
{
    return c == '.' || c == '?' || c == '!' || c == ':' || c == 0x2026 || c == 0x3002 ||
           c == 0xff01 || c == 0xff1a || c == 0xff1f;
}

static bool sym_currency(long c)
{
    return c == '$' || c == 0xa2 || c == 0xa3 || c == 0xa5 || c == 0x20ac || c == 0x20b9 ||
           c == 0x20a9 || c == 0x20bd;
}

/* One code point as it is compared: the dashes and the minus sign are '-'. */
static long sym_fold(long c)
{
    return c == 0x2010 || c == 0x2011 || c == 0x2012 || c == 0x2013 || c == 0x2212 ? '-' : c;
}

static bool tok_is_word(const struct gdoc *d, size_t i, size_t min)
{
    const struct text_tok *t = &d->t.tok[i];
    return t->kind != TEXT_NUM && (t->flags & TEXT_F_ALPHA) && !(t->flags & TEXT_F_DIGIT) &&
           t->len >= min;
}

/*
 * Whether the symbols s[0..n) between tokens l and r (either may be -1) are
 * a joiner of two words: self-learn, COVID-19, iPhone/Android, R&D, U.S,
 * rent + bills, Stream | Watch.
 */
static bool sym_joiner(const struct gdoc *d, const long *s, size_t n, long l, long r)
{
    if (n != 1 || l < 0 || r < 0)
        return false;
    size_t a = (size_t)l, b = (size_t)r;
    switch (s[0]) {
    case '-':
        return tok_is_word(d, a, 2) || tok_is_word(d, b, 2);
    case '.':
        return tok_is_word(d, a, 1) || tok_is_word(d, b, 1); /* "no.1", "e.g", "node.js" */
    case '/':
    case '+':
        return tok_is_word(d, a, 2) && tok_is_word(d, b, 2);
    case '&':
    case '_':
    case '|':
    case ':':
        return tok_is_word(d, a, 1) && tok_is_word(d, b, 1);
    default:
        return false;
    }
}

static bool sym_arrow(const long *s, size_t n)
{
    return (n == 2 && (s[0] == '-' || s[0] == '=') && s[1] == '>') ||
           (n == 1 && (s[0] == 0x2192 || s[0] == 0x21d2));
}

/* Only characters of set (a NUL-terminated ASCII list) in s[0..n), n >= 1. */
static bool sym_only(const long *s, size_t n, const char *set)
{
    for (size_t i = 0; i < n; i++)
        if (s[i] <= 0 || s[i] > 0x7e || strchr(set, (int)s[i]) == NULL)
            return false;
    return n > 0;
}

/*
 * Symbols that carry no meaning where they stand: a joiner of two words
 * (written against both or against neither), an arrow (the direction
 * guard's), emphasis written against one side of a word (*US*, **bold**,
 * _it_), a dash at either end of the text.
 */
static bool sym_prose(const struct gdoc *d, const long *s, size_t n, long l, long r, bool att_l,
                      bool att_r)
{
    if (sym_arrow(s, n))
        return true;
    if (sym_joiner(d, s, n, l, r) &&
        (att_l == att_r || (tok_is_word(d, (size_t)l, 2) && tok_is_word(d, (size_t)r, 2))))
        return true; /* "merchant account/ payment gateway" too */
    if (att_l != att_r && sym_only(s, n, "*_~") && tok_is_word(d, (size_t)(att_l ? l : r), 1))
        return true;
    return !att_l && !att_r && (l < 0 || r < 0) && sym_only(s, n, "-");
}

static void syms_add(struct syms *sy, uint64_t f)
{
    sy->total++;
    if (sy->n < SYM_MAX)
        sy->f[sy->n++] = f;
    else
        sy->more += f;
}

/*
 * The feature of the gap g[0..n) between token l and token r (-1: none).
 * Pieces are the gap's runs between white space; each is cleaned, and the
 * non-empty ones are joined.
 */
static void gap_symbols(const struct gdoc *d, const char *g, size_t n, long l, long r,
                        struct syms *sy)
{
    long s[SYM_PIECE_MAX];
    size_t m = 0, i = 0;
    uint64_t rest = PC_FNV_SEED; /* what does not fit in s[], hashed as written */
    bool att_l = false, att_r = false, any = false;
    while (i < n) {
        long c;
        size_t k = utf8_cp(g + i, n - i, &c);
        if (sym_space(c)) {
            i += k;
            continue;
        }
        size_t start = i, pm = m; /* one piece: [start, i) */
        while (i < n) {
            k = utf8_cp(g + i, n - i, &c);
            if (sym_space(c))
                break;
            c = sym_fold(c);
            if (!sym_noise(c) && m < SYM_PIECE_MAX)
                s[m++] = c;
            else if (!sym_noise(c))
                rest = pc_fnv1a(rest, g + i, k);
            i += k;
        }
        bool left = start == 0 && l >= 0, right = i == n && r >= 0;
        while (!right && m > pm && sym_stop(s[m - 1]))
            m--; /* "word." "word?!" "Recovery:" */
        size_t lead = pm;
        while (!left && lead < m && sym_stop(s[lead]))
            lead++;
        if (lead == m)
            m = pm; /* "...and", but not "../src" */
        /* "$5", "-$5", "$ 5", "5%", "100 °F", "2000$": the numbers guard reads those */
        bool num_r = r >= 0 && tok_is_number(d, (size_t)r),
             num_l = l >= 0 && tok_is_number(d, (size_t)l);
        for (size_t j = pm; j < m; j++)
            if ((num_r && sym_currency(s[j])) ||
                (num_l && (sym_currency(s[j]) || s[j] == '%' || s[j] == 0xb0 || s[j] == 0x2030)))
                s[j] = 0;
        if (right && !left && m > pm && (s[pm] == '#' || s[pm] == '@'))
            s[pm] = 0; /* "#1", "#tag", "@name" */
        size_t kept = pm;
        for (size_t j = pm; j < m; j++)
            if (s[j] != 0)
                s[kept++] = s[j];
        m = kept;
        if (m > pm) {
            att_l = any ? att_l : left;
            att_r = right;
            any = true;
        }
    }
    if (!any && rest == PC_FNV_SEED)
        return;
    if (m > 0 && sym_prose(d, s, m, l, r, att_l, att_r))
        return;
    /*
     * Bound to a side it is written against; written apart from both, to
     * each side that is not a function word ("x > 5", "b - a", but "between
     * & and &&" binds & to between only).
     */
    bool apart = !att_l && !att_r;
    bool bind_l = att_l || (apart && l >= 0 && !is_func(d, (size_t)l));
    bool bind_r = att_r || (apart && r >= 0 && !is_func(d, (size_t)r));
    uint64_t h = pc_fnv1a(rest, s, m * sizeof s[0]);
    h = pc_fnv1a(h, "|", 1);
    uint64_t hl = bind_l && l >= 0 ? d->h[l] : 0, hr = bind_r && r >= 0 ? d->h[r] : 0;
    h = pc_fnv1a(h, &hl, sizeof hl);
    h = pc_fnv1a(h, &hr, sizeof hr);
    syms_add(sy, h);
}

/* A gap that holds a letter or digit was not tokenized (words past TEXT_MAX_TOKENS): skipped. */
static bool gap_untokenized(const char *g, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)g[i];
        if ((c >= '0' && c <= '9') || ((c | 0x20) >= 'a' && (c | 0x20) <= 'z'))
            return true;
    }
    return false;
}

/*
 * The gap [at, end) between token l and token r (-1: none), as far as the
 * text is read: a long text's middle (text_cap), which nothing tokenized,
 * is cut out of the gap that spans it, so that its two sides are read as a
 * text's end and start. Reading the middle cost every check time in the
 * length of the text, on the worker's thread.
 */
static void gap_capped(const struct gdoc *d, const char *at, const char *end, long l, long r,
                       struct syms *sy)
{
    size_t head, tail;
    text_cap(d->text, d->len, TEXT_MAX_READ, &head, &tail);
    const char *cut = d->text + head, *resume = d->text + d->len - tail;
    if (tail > 0 && at < resume && end > cut) {
        gap_capped(d, at, PC_MIN(end, cut), l, -1, sy);
        gap_capped(d, PC_MAX(at, resume), end, -1, r, sy);
        return;
    }
    if (end > at && !gap_untokenized(at, (size_t)(end - at)))
        gap_symbols(d, at, (size_t)(end - at), l, r, sy);
}

static void symbols_of(const struct gdoc *d, struct syms *sy)
{
    sy->n = sy->total = 0;
    sy->more = 0;
    const char *at = d->text;
    for (size_t k = 0; k <= d->t.n; k++) {
        const char *end = k < d->t.n ? d->t.tok[k].raw : d->text + d->len;
        gap_capped(d, at, end, (long)k - 1, k < d->t.n ? (long)k : -1, sy);
        if (k < d->t.n) {
            const char *e = d->t.tok[k].raw + d->t.tok[k].raw_len;
            at = e > at ? e : at;
        }
    }
    qsort(sy->f, sy->n, sizeof sy->f[0], u64_cmp);
}

/*
 * Emoji: decoration where one text alone has them ("🤗 Datasets" / "Datasets"), but meaning
 * where both do ("what does 🔥 mean in a text" / "what does 💧 mean in a text"): then the two
 * texts must use the same ones (as a set: repeated or moved is the same; skin tones, variation
 * selectors and joiners aside).
 */
#define EMOJI_MAX 64 /* distinct emoji kept per text; the rest are summed */

struct emojis {
    long c[EMOJI_MAX];
    size_t n;
    uint64_t more; /* sum of the code points past EMOJI_MAX (a text of many emoji) */
};

static bool is_emoji(long c)
{
    return (c >= 0x2600 && c <= 0x27bf) ||
           (c >= 0x1f000 && c <= 0x1faff && !(c >= 0x1f3fb && c <= 0x1f3ff)) ||
           (c >= 0x2b00 && c <= 0x2bff);
}

static void emojis_in(const char *s, size_t n, struct emojis *e)
{
    for (size_t i = 0; i < n;) {
        long c;
        i += utf8_cp(s + i, n - i, &c);
        if (!is_emoji(c))
            continue;
        bool seen = false;
        for (size_t k = 0; k < e->n && !seen; k++)
            seen = e->c[k] == c;
        if (seen)
            continue;
        if (e->n < EMOJI_MAX)
            e->c[e->n++] = c;
        else
            e->more += (uint64_t)c; /* repeats past the cap count again: rare, and only rejects */
    }
}

/* The emoji of the part of d that is read (a long text's head and tail), sorted. */
static void emojis_of(const struct gdoc *d, struct emojis *e)
{
    e->n = 0;
    e->more = 0;
    size_t head, tail;
    text_cap(d->text, d->len, TEXT_MAX_READ, &head, &tail);
    emojis_in(d->text, head, e);
    if (tail > 0)
        emojis_in(d->text + d->len - tail, tail, e);
    qsort(e->c, e->n, sizeof e->c[0], long_cmp);
}

static bool emojis_differ(const struct gdoc *a, const struct gdoc *b)
{
    struct emojis *e = pc_malloc(2 * sizeof *e);
    emojis_of(a, &e[0]);
    emojis_of(b, &e[1]);
    bool both = (e[0].n > 0) && (e[1].n > 0);
    bool differ = both && (e[0].n != e[1].n || e[0].more != e[1].more ||
                           memcmp(e[0].c, e[1].c, e[0].n * sizeof e[0].c[0]) != 0);
    free(e);
    return differ;
}

static bool guard_symbols(const struct gdoc *a, const struct gdoc *b)
{
    struct syms *s = pc_malloc(2 * sizeof *s);
    symbols_of(a, &s[0]);
    symbols_of(b, &s[1]);
    bool differ = s[0].total != s[1].total || s[0].more != s[1].more ||
                  memcmp(s[0].f, s[1].f, s[0].n * sizeof s[0].f[0]) != 0;
    free(s);
    return differ || emojis_differ(a, b);
}

/* ---- particles ------------------------------------------------------------------------------ */

/*
 * Opposite particles in the same slot: the same word before them (the verb:
 * "jumping into" / "jumping out of") or after them (the object: "in the
 * water" / "out of the water"). A particle is used in a slot when the
 * content word nearest it on that side (within the sentence) is that word.
 */

#define PART_MAX 32

struct particle {
    uint8_t group, side;
    uint64_t before, after; /* hashes of the nearest content words, 0 = none */
};

/* The group and side of token i when it is a word of category cat (L_PART...); false if not. */
static bool slot_word_at(const struct gdoc *d, size_t i, enum lex_cat cat, uint8_t *group,
                         uint8_t *side)
{
    const struct lex *l = lex_of(d, i, cat);
    if (l == NULL)
        return false;
    *group = (uint8_t)l->val;
    *side = l->sub;
    if (cat == L_QUANT && text_is(&d->t, i, "most") && i > 0 &&
        (text_is(&d->t, i - 1, "the") || text_is(&d->t, i - 1, "at")))
        return false; /* "the most popular", "at most": a degree or a bound, no quantity */
    if (cat == L_QUANT && text_is(&d->t, i, "few") && i > 0 && text_is(&d->t, i - 1, "a"))
        *side = (uint8_t)(l->sub - 1); /* "a few" is some */
    return true;
}

/* Particles and quantity words fill a slot; they are not what the slot is next to. */
static bool slot_filler(const struct gdoc *d, size_t i)
{
    return lex_of(d, i, L_PART) != NULL || lex_of(d, i, L_QUANT) != NULL;
}

/* The content word nearest token i going by step, within the sentence: its hash or 0. */
static uint64_t nearest_content(const struct gdoc *d, size_t i, int step)
{
    for (long k = (long)i + step; k >= 0 && k < (long)d->t.n; k += step) {
        const struct text_tok *t = &d->t.tok[k];
        if (step > 0 && (t->flags & TEXT_F_START))
            return 0;
        if (!is_func(d, (size_t)k) && !(t->flags & TEXT_F_FILLER) &&
            lex_of(d, (size_t)k, L_NEG) == NULL && !slot_filler(d, (size_t)k))
            return d->h[k];
        if (step < 0 && (t->flags & TEXT_F_START))
            return 0;
    }
    return 0;
}

/* The words of category cat in d, each with the content words nearest it. */
static size_t slots_of(const struct gdoc *d, enum lex_cat cat, struct particle *p)
{
    size_t n = 0;
    for (size_t i = 0; i < d->t.n && n < PART_MAX; i++) {
        uint8_t g, sd;
        if (slot_word_at(d, i, cat, &g, &sd))
            p[n++] = (struct particle){g, sd, nearest_content(d, i, -1), nearest_content(d, i, 1)};
    }
    return n;
}

static bool same_slot(const struct particle *x, const struct particle *y)
{
    return x->group == y->group &&
           ((x->before != 0 && x->before == y->before) || (x->after != 0 && x->after == y->after));
}

/* Whether ps has a particle of x's group on side `side` in x's slot. */
static bool slot_has(const struct particle *ps, size_t n, const struct particle *x, uint8_t side)
{
    for (size_t i = 0; i < n; i++)
        if (ps[i].side == side && same_slot(&ps[i], x))
            return true;
    return false;
}

/*
 * Words of category cat of different sides of one group in the same slot,
 * and neither text has the other's side there too ("climbing into the
 * cage" / "climbing out of the cage"; "lots of people" / "few people").
 */
static bool slots_differ(const struct gdoc *a, const struct gdoc *b, enum lex_cat cat)
{
    struct particle pa[PART_MAX], pb[PART_MAX];
    size_t na = slots_of(a, cat, pa), nb = slots_of(b, cat, pb);
    for (size_t i = 0; i < na; i++)
        for (size_t j = 0; j < nb; j++)
            if (pa[i].side != pb[j].side && same_slot(&pa[i], &pb[j]) &&
                !slot_has(pa, na, &pb[j], pb[j].side) && !slot_has(pb, nb, &pa[i], pa[i].side))
                return true;
    return false;
}

static bool guard_particles(const struct gdoc *a, const struct gdoc *b)
{
    return slots_differ(a, b, L_PART);
}

/* ---- opposites from WordNet -------------------------------------------------------------------
 */

static bool has_lemma(const struct gdoc *d, uint16_t x)
{
    return bsearch(&x, d->lemmas, d->nlemmas, sizeof x, u16_cmp) != NULL;
}

/* The first pair whose a is x. */
static size_t pairs_from(uint16_t x)
{
    size_t lo = 0, hi = wordnet_npairs;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (wordnet_pairs[mid].a < x)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static bool token_is_lemma(const struct gdoc *d, size_t i, uint16_t x)
{
    for (int k = 0; k < d->wn_n[i]; k++)
        if (wordnet_forms[d->wn[i] + k].lemma == x)
            return true;
    return false;
}

/*
 * Whether a token of a with lemma x and one of b with lemma y stand in the
 * same place: the content word nearest them on one side is the same ("the
 * sink is empty" / "the sink is full"), so that two long texts that happen
 * to use give and take far apart are not opposites.
 */
static bool same_place(const struct gdoc *a, uint16_t x, const struct gdoc *b, uint16_t y)
{
    for (size_t i = 0; i < a->t.n; i++) {
        if (a->wn[i] < 0 || !token_is_lemma(a, i, x))
            continue;
        uint64_t before = nearest_content(a, i, -1), after = nearest_content(a, i, 1);
        for (size_t j = 0; j < b->t.n; j++)
            if (b->wn[j] >= 0 && token_is_lemma(b, j, y) &&
                ((before != 0 && before == nearest_content(b, j, -1)) ||
                 (after != 0 && after == nearest_content(b, j, 1))))
                return true;
    }
    return false;
}

/*
 * One text uses a word whose opposite (of this kind) the other uses in the
 * same place, and neither uses both: "a sink that is empty" / "a sink that
 * is full". The pairs are listed both ways round: one direction suffices.
 */
static bool opposite_lemmas(const struct gdoc *a, const struct gdoc *b, int kind)
{
    for (size_t i = 0; i < a->nlemmas; i++) {
        uint16_t x = a->lemmas[i];
        if (has_lemma(b, x))
            continue;
        for (size_t k = pairs_from(x); k < wordnet_npairs && wordnet_pairs[k].a == x; k++) {
            uint16_t y = wordnet_pairs[k].b;
            if (wordnet_pairs[k].kind == kind && has_lemma(b, y) && !has_lemma(a, y) &&
                same_place(a, x, b, y))
                return true;
        }
    }
    return false;
}

/* Opposites, unless one negation makes them say the same (see guard_negation). */
static bool guard_wordnet(const struct gdoc *a, const struct gdoc *b)
{
    return opposite_lemmas(a, b, WN_ANTONYM) && !negated_once(a, b);
}

static bool guard_affixes(const struct gdoc *a, const struct gdoc *b)
{
    return opposite_lemmas(a, b, WN_NEGATION) && !negated_once(a, b);
}

/* ---- intent ------------------------------------------------------------------------------------
 */

/*
 * Words that turn what is asked for into its undoing or avoidance: "how to
 * start X" / "how to prevent X", "performing" / "failing to perform". Each
 * text counts them; a text whose count differs asks the opposite, unless a
 * negation makes up the difference ("fails to start" / "does not start").
 */
static bool intent_at(const struct gdoc *d, size_t i)
{
    if (text_is(&d->t, i, "instead"))
        return i + 1 < d->t.n && text_is(&d->t, i + 1, "of");
    return lex_of(d, i, L_INTENT) != NULL;
}

/* The intent words of d that o has not (typos allowed: appears_in). */
static size_t intents_unmatched(const struct gdoc *d, const struct gdoc *o)
{
    size_t n = 0;
    for (size_t i = 0; i < d->t.n; i++)
        n += intent_at(d, i) && !appears_in(d, i, o);
    return n;
}

static size_t intents_of(const struct gdoc *d)
{
    size_t n = 0;
    for (size_t i = 0; i < d->t.n; i++)
        n += intent_at(d, i);
    return n;
}

static bool guard_intent(const struct gdoc *a, const struct gdoc *b)
{
    size_t ua = intents_unmatched(a, b), ub = intents_unmatched(b, a);
    if (ua == ub)
        return false;
    return intents_of(a) + negations_of(a) != intents_of(b) + negations_of(b);
}

/* ---- verbs -------------------------------------------------------------------------------------
 */

#define VERBS_MAX 16

/* The progressive verbs of d ("is running"): their tokens. */
static size_t verbs_of(const struct gdoc *d, size_t *v)
{
    size_t n = 0;
    for (size_t i = 0; i < d->t.n && n < VERBS_MAX; i++)
        if (progressive_at(d, i))
            v[n++] = i;
    return n;
}

/* Whether tokens i of a and j of b can name one thing: the same word, lemma or similar. */
static bool words_alike(const struct gdoc *a, size_t i, const struct gdoc *b, size_t j)
{
    size_t n = a->t.tok[i].len, m = b->t.tok[j].len;
    if (a->h[i] == b->h[j] ||
        (PC_MAX(n, m) >= 5 && one_edit(text_str(&a->t, i), n, text_str(&b->t, j), m)))
        return true; /* the same word, or a typo of it */
    for (int x = 0; x < a->wn_n[i]; x++) {
        uint16_t la = wordnet_forms[a->wn[i] + x].lemma;
        if (token_is_lemma(b, j, la))
            return true;
        for (size_t k = pairs_from(la); k < wordnet_npairs && wordnet_pairs[k].a == la; k++)
            if (wordnet_pairs[k].kind == WN_SIMILAR && token_is_lemma(b, j, wordnet_pairs[k].b))
                return true;
    }
    return false;
}

/* Every word of va (in a) has one alike in vb (in b): verbs, replaced words. */
static bool words_covered(const struct gdoc *a, const size_t *va, size_t na, const struct gdoc *b,
                          const size_t *vb, size_t nb)
{
    for (size_t i = 0; i < na; i++) {
        bool alike = false;
        for (size_t j = 0; j < nb && !alike; j++)
            alike = words_alike(a, va[i], b, vb[j]);
        if (!alike)
            return false;
    }
    return true;
}

/* Whether verb v of d has a counterpart of the same meaning among the verbs vo of o. */
static bool verb_alike_in(const struct gdoc *d, size_t v, const struct gdoc *o, const size_t *vo,
                          size_t no)
{
    for (size_t j = 0; j < no; j++)
        if (words_alike(d, v, o, vo[j]))
            return true;
    return false;
}

/*
 * One subject does something else: a verb of a that b has no counterpart
 * for, whose subject does in b a verb that a has no counterpart for ("a grey
 * dog is running in the grass and a brown dog looks on" / "a grey dog is
 * lying in the grass and a brown dog is looking on"), however many verbs
 * each text has.
 */
static bool verb_of_subject_differs(const struct gdoc *a, const size_t *va, size_t na,
                                    const struct gdoc *b, const size_t *vb, size_t nb)
{
    for (size_t i = 0; i < na; i++) {
        struct role sa = subject_of(a, va[i]);
        if (sa.from == sa.to || verb_alike_in(a, va[i], b, vb, nb))
            continue;
        for (size_t j = 0; j < nb; j++) {
            struct role sb = subject_of(b, vb[j]);
            if (sb.from != sb.to && a->h[sa.to - 1] == b->h[sb.to - 1] &&
                !verb_alike_in(b, vb[j], a, va, na))
                return true;
        }
    }
    return false;
}

/*
 * The action differs: as many progressive verbs on each side, and one that
 * has no counterpart of the same meaning on the other ("a dog is running
 * through the leaves" / "a dog is resting in the leaves"; but "a woman is
 * cutting an onion" / "a woman is slicing an onion" pass: WordNet's
 * similar verbs); or, however many verbs there are, one subject does
 * something else (verb_of_subject_differs).
 */
static bool guard_verbs(const struct gdoc *a, const struct gdoc *b)
{
    size_t va[VERBS_MAX], vb[VERBS_MAX];
    size_t na = verbs_of(a, va), nb = verbs_of(b, vb);
    if (na == nb && na > 0 &&
        !(words_covered(a, va, na, b, vb, nb) && words_covered(b, vb, nb, a, va, na)))
        return true;
    return verb_of_subject_differs(a, va, na, b, vb, nb);
}

/* ---- rank
 * ---------------------------------------------------------------------------------------- */

/*
 * Where a thing stands in an order. An ordinal or rank word (second, third,
 * last, next, previous...) that only one text puts before a word both use
 * ("the closest station" / "the second closest station"), or one adjective
 * both use, a superlative in one text only ("cheap flights" / "the
 * cheapest flights": WordNet's degrees). Swaps between members of one group
 * (first/last, more/less, best/worst) are the antonyms guard's.
 */
/* The lemma and degree of token i when it is an adjective in WordNet; false otherwise. */
static bool adjective_at(const struct gdoc *d, size_t i, uint16_t *lemma, unsigned *degree)
{
    for (int k = 0; d->wn[i] >= 0 && k < d->wn_n[i]; k++) {
        const struct wordnet_form *f = &wordnet_forms[d->wn[i] + k];
        if (f->pos == 'a') {
            *lemma = f->lemma;
            *degree = f->degree;
            return true;
        }
    }
    return false;
}

/* An ordinal of a that o lacks, before a word o has too. */
static bool rank_added(const struct gdoc *a, const struct gdoc *o)
{
    for (size_t i = 0; i + 1 < a->t.n; i++)
        if (lex_of(a, i, L_RANK) != NULL && !appears_in(a, i, o) && appears_in(a, i + 1, o) &&
            !is_func(a, i + 1))
            return true;
    return false;
}

#define ADJ_MAX 256

/* d's adjectives as (lemma << 1 | superlative), sorted, distinct. */
static size_t adjectives_of(const struct gdoc *d, uint32_t *adj)
{
    size_t n = 0;
    for (size_t i = 0; i < d->t.n && n < ADJ_MAX; i++) {
        uint16_t lemma;
        unsigned degree;
        if (adjective_at(d, i, &lemma, &degree))
            adj[n++] = (uint32_t)lemma << 1 | (degree == 2);
    }
    qsort(adj, n, sizeof *adj, u32_cmp);
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (k == 0 || adj[k - 1] != adj[i])
            adj[k++] = adj[i];
    return k;
}

static bool has_u32(const uint32_t *v, size_t n, uint32_t x)
{
    return bsearch(&x, v, n, sizeof x, u32_cmp) != NULL;
}

/* An adjective both texts use, as a superlative in one of them only ("cheap" / "cheapest"). */
static bool superlative_differs(const struct gdoc *a, const struct gdoc *b)
{
    uint32_t *x = pc_malloc(2 * ADJ_MAX * sizeof *x), *y = x + ADJ_MAX;
    size_t nx = adjectives_of(a, x), ny = adjectives_of(b, y);
    bool differs = false;
    for (size_t i = 0; i < nx && !differs; i++) {
        uint32_t other = x[i] ^ 1; /* the same lemma at the other degree */
        differs = has_u32(y, ny, other) && !has_u32(y, ny, x[i]) && !has_u32(x, nx, other);
    }
    free(x);
    return differs;
}

/*
 * "only" before a word both texts use, in one text only: it restricts ("can
 * only admins delete posts" / "can admins delete posts"). Not before a
 * number, where it stresses ("lost only 1 cent"; the numbers guard's).
 */
static bool only_added(const struct gdoc *a, const struct gdoc *o)
{
    for (size_t i = 0; i + 1 < a->t.n; i++)
        if (text_is(&a->t, i, "only") && !appears_in(a, i, o) && appears_in(a, i + 1, o) &&
            !tok_is_number(a, i + 1) && lex_of(a, i + 1, L_NUMWORD) == NULL)
            return true;
    return false;
}

static bool guard_rank(const struct gdoc *a, const struct gdoc *b)
{
    return rank_added(a, b) || rank_added(b, a) || superlative_differs(a, b) || only_added(a, b) ||
           only_added(b, a);
}

/* ---- quantity ------------------------------------------------------------------------------ */

/* A quantity word of another side in the same place ("lots of people" / "few people"). */
static bool guard_quantity(const struct gdoc *a, const struct gdoc *b)
{
    return slots_differ(a, b, L_QUANT);
}

/* ---- accents ------------------------------------------------------------------------------- */

/*
 * The tokenizer folds accents, so "año" and "ano", "papá" and "papa" are one word to the
 * embedders and to every other guard. Folding is right for a text typed on a plain keyboard
 * ("cafe" for "café"); but where both texts use accents, a word that differs from the other's
 * only by them is another word. Accents here are Latin-1 and Latin Extended-A letters that
 * fold to one letter, and combining marks; ß, æ, þ and œ fold to two letters and are spellings,
 * not accents ("Straße" / "Strasse").
 */

/* Whether cp is an accented Latin letter or a combining mark. */
static bool accent_cp(long cp)
{
    if (cp >= 0x300 && cp <= 0x36f)
        return true;
    if (cp < 0xc0 || cp > 0x17f || cp == 0xd7 || cp == 0xf7)
        return false;
    /* ß (0xdf), æ/Æ (0xc6, 0xe6), þ/Þ (0xde, 0xfe), ð is an accent-less letter too, œ/Œ */
    return cp != 0xdf && cp != 0xc6 && cp != 0xe6 && cp != 0xde && cp != 0xfe && cp != 0xd0 &&
           cp != 0xf0 && cp != 0x152 && cp != 0x153 && cp != 0x131 && cp != 0x138 && cp != 0x149 &&
           cp != 0x17f;
}

/* cp in lower case, as far as the accents need (ASCII, Latin-1, Latin Extended-A). */
static long accent_lower(long cp)
{
    if ((cp >= 'A' && cp <= 'Z') || (cp >= 0xc0 && cp <= 0xde && cp != 0xd7))
        return cp + 0x20;
    if (cp == 0x178)
        return 0xff;
    if ((cp >= 0x100 && cp <= 0x137) || (cp >= 0x14a && cp <= 0x177))
        return cp % 2 == 0 ? cp + 1 : cp;
    if ((cp >= 0x139 && cp <= 0x148) || (cp >= 0x179 && cp <= 0x17e))
        return cp % 2 == 1 ? cp + 1 : cp;
    return cp;
}

struct accents {
    uint64_t fold[TEXT_MAX_TOKENS]; /* the folded word (0: not a word) */
    uint64_t form[TEXT_MAX_TOKENS]; /* the word as written, case aside, accents kept */
    bool any;                       /* some word of the text has an accent */
};

/*
 * Token i's accents: a hash of each accented letter or mark (lower case) and its place among
 * the token's characters, and *accented if there is one. Letters without accents add nothing,
 * so the folded word and this together tell "año" from "ano", "ano" from "Ano" not. (A letter
 * written as a base and a combining mark is another accent than the same letter precomposed:
 * a miss, never a wrong hit.)
 */
static uint64_t accent_form(const struct gdoc *d, size_t i, bool *accented)
{
    const struct text_tok *t = &d->t.tok[i];
    uint64_t h = PC_FNV_SEED;
    *accented = false;
    long at = 0;
    for (size_t k = 0; k < t->raw_len; at++) {
        long cp;
        k += utf8_cp(t->raw + k, t->raw_len - k, &cp);
        if (!accent_cp(cp))
            continue;
        *accented = true;
        long mark[2] = {accent_lower(cp), at};
        h = pc_fnv1a(h, mark, sizeof mark);
    }
    return h | 1;
}

static void accents_of(const struct gdoc *d, struct accents *ac)
{
    ac->any = false;
    for (size_t i = 0; i < d->t.n; i++) {
        const struct text_tok *t = &d->t.tok[i];
        ac->fold[i] = ac->form[i] = 0;
        /* a word written whole (not a part of a contraction, whose raw form is all of it) */
        if (t->kind != TEXT_WORD || (t->flags & TEXT_F_SYNTH) ||
            (i + 1 < d->t.n && d->t.tok[i + 1].raw == t->raw) ||
            (i > 0 && d->t.tok[i - 1].raw == t->raw))
            continue;
        bool accented;
        ac->form[i] = accent_form(d, i, &accented);
        ac->fold[i] = pc_fnv1a(PC_FNV_SEED, text_str(&d->t, i), t->len) | 1;
        ac->any = ac->any || accented;
    }
}

/* A word of d that o writes with other accents only (the same folded word, never as d does). */
static bool accents_unmatched(const struct gdoc *d, const struct accents *x, const struct gdoc *o,
                              const struct accents *y)
{
    for (size_t i = 0; i < d->t.n; i++) {
        if (x->fold[i] == 0)
            continue;
        bool other = false, same = false;
        for (size_t j = 0; j < o->t.n && !same; j++) {
            if (y->fold[j] != x->fold[i])
                continue;
            same = y->form[j] == x->form[i];
            other = other || !same;
        }
        if (other && !same)
            return true;
    }
    return false;
}

static bool guard_accents(const struct gdoc *a, const struct gdoc *b)
{
    struct accents *ac = pc_malloc(2 * sizeof *ac);
    accents_of(a, &ac[0]);
    accents_of(b, &ac[1]);
    /* one side typed without any accent: folding is what it needs */
    bool differ =
        ac[0].any && ac[1].any &&
        (accents_unmatched(a, &ac[0], b, &ac[1]) || accents_unmatched(b, &ac[1], a, &ac[0]));
    free(ac);
    return differ;
}

/* ---- replaced words in a long text ------------------------------------------------------ */

/*
 * A long text changed in one or two words (a name, an object: "why did the travel expenses
 * rise ... the hotel prices" / "why did the software expenses rise ... the license prices") is
 * near 1 by any embedder: the change is a small part of its words. The swap guard catches one
 * word replaced on each side, in a text of any length; two were left to the similarity, which
 * is right in a short text (a rewording changes a few words) but not in a long one, where a
 * rewording changes more than two. Rejected unless every replaced word has a counterpart of
 * the same meaning among the other side's (a synonym, an inflection or a typo: words_alike).
 */
#define REPLACED_MIN_WORDS 32 /* content words of each text before two words replaced count */
#define REPLACED_MAX       2  /* words replaced on a side; more is a rewording */

/* The content words of d that o lacks, up to REPLACED_MAX + 1 of them: their count. */
static size_t replaced_words(const struct gdoc *d, const struct gdoc *o, size_t *w)
{
    size_t n = 0;
    for (size_t i = 0; i < d->t.n && n <= REPLACED_MAX; i++)
        if (is_content(d, i) && !appears_in(d, i, o))
            w[n++] = i;
    return n;
}

static bool guard_replaced(const struct gdoc *a, const struct gdoc *b)
{
    if (content_words(a) < REPLACED_MIN_WORDS || content_words(b) < REPLACED_MIN_WORDS)
        return false;
    size_t wa[REPLACED_MAX + 1], wb[REPLACED_MAX + 1];
    size_t na = replaced_words(a, b, wa), nb = replaced_words(b, a, wb);
    if (na == 0 || nb == 0 || na > REPLACED_MAX || nb > REPLACED_MAX)
        return false; /* nothing replaced (extra's, if added), or a rewording */
    return !(words_covered(a, wa, na, b, wb, nb) && words_covered(b, wb, nb, a, wa, na));
}

/* ---- words in another script ------------------------------------------------------------ */

/*
 * The guards' word lists (function words, opposites, WordNet) are English,
 * so they tell a synonym from another word only in Latin letters. A word in
 * another script (Chinese, Japanese, Korean, Cyrillic, Greek, Arabic,
 * Hebrew, Devanagari, Thai...; Latin letters with accents are none: "Việt"
 * / "Viet") replaced on both sides may name anything: swap lets two or more
 * replaced words through as a rewording, trusting the similarity, and an
 * embedder that cannot read the script gives every such text one vector
 * (the sentence encoder of the tests puts "为什么我的电脑能开机" / "北京今天天
 * 气怎么样" at 1.0). Rejected when each text has a content word the other
 * lacks and one of those is in such a script; a word added on one side is
 * extra's, a word moved is direction's.
 */

/* Whether token i is written in letters the guards' lists do not cover: not Latin ones. */
static bool unlisted_script(const struct gdoc *d, size_t i)
{
    const struct text_tok *t = &d->t.tok[i];
    if (t->kind == TEXT_CJK)
        return true;
    const char *w = text_str(&d->t, i);
    for (size_t k = 0; t->kind == TEXT_WORD && k < t->len;) {
        long cp;
        k += utf8_cp(w + k, t->len - k, &cp);
        bool latin = cp < 0x250 || (cp >= 0x1e00 && cp <= 0x1eff) || (cp >= 0x300 && cp <= 0x36f);
        if (!latin)
            return true;
    }
    return false;
}

/* Whether d has a content word o lacks (*any), and one in an unlisted script (returned). */
static bool unlisted_unmatched(const struct gdoc *d, const struct gdoc *o, bool *any)
{
    *any = false;
    for (size_t i = 0; i < d->t.n; i++) {
        if (!is_content(d, i) || appears_in(d, i, o))
            continue;
        *any = true;
        if (unlisted_script(d, i))
            return true;
    }
    return false;
}

static bool guard_scripts(const struct gdoc *a, const struct gdoc *b)
{
    bool any_a, any_b;
    bool ua = unlisted_unmatched(a, b, &any_a), ub = unlisted_unmatched(b, a, &any_b);
    return any_a && any_b && (ua || ub);
}

/* ---- the check ------------------------------------------------------------------------------ */

typedef bool guard_fn(const struct gdoc *a, const struct gdoc *b);

static guard_fn *const guard_fns[GUARD__COUNT] = {
    [GUARD_NUMBERS] = guard_numbers,     [GUARD_NEGATION] = guard_negation,
    [GUARD_ENTITIES] = guard_entities,   [GUARD_ANTONYMS] = guard_antonyms,
    [GUARD_DATES] = guard_dates,         [GUARD_LENGTH] = guard_length,
    [GUARD_DIRECTION] = guard_direction, [GUARD_QUESTION] = guard_question,
    [GUARD_EXTRA] = guard_extra,         [GUARD_SWAP] = guard_swap,
    [GUARD_SYMBOLS] = guard_symbols,     [GUARD_PARTICLES] = guard_particles,
    [GUARD_WORDNET] = guard_wordnet,     [GUARD_AFFIXES] = guard_affixes,
    [GUARD_INTENT] = guard_intent,       [GUARD_VERBS] = guard_verbs,
    [GUARD_RANK] = guard_rank,           [GUARD_QUANTITY] = guard_quantity,
    [GUARD_ACCENTS] = guard_accents,     [GUARD_REPLACED] = guard_replaced,
    [GUARD_SCRIPTS] = guard_scripts,
};

int guard_check(const char *a, size_t alen, const char *b, size_t blen, unsigned mask)
{
    if ((mask & GUARD_ALL) == 0)
        return GUARD__COUNT;
    pthread_once(&lex_once, lex_build);
    struct gdoc *d = pc_malloc(2 * sizeof *d);
    prepare(&d[0], a, alen);
    prepare(&d[1], b, blen);
    int rc = GUARD__COUNT;
    for (int g = 0; g < GUARD__COUNT && rc == GUARD__COUNT; g++)
        if ((mask & GUARD_MASK(g)) && guard_fns[g](&d[0], &d[1]))
            rc = g;
    free(d);
    return rc;
}

/* ---- the semantic-guards key (pc_conf.h's rules) ---------------------------------- */

unsigned guard_mask(char *const *v, size_t n)
{
    unsigned mask;
    if (guard_parse(v, n, &mask, NULL, 0) < 0)
        return GUARD_ALL; /* an invalid list (refused by the configuration) keeps every guard */
    return mask;
}

/* One word of semantic-guards: a guard name, all or none. */
static int check_word(const char *v, char *err, size_t errlen)
{
    char *one[] = {(char *)v};
    unsigned mask;
    if (!pc_strcaseeq(v, "all") && !pc_strcaseeq(v, "none") &&
        guard_parse(one, 1, &mask, err, errlen) < 0)
        return -1;
    return 0;
}

/* The words together: all and none alone. */
static int check_list(const struct conf *c, char *err, size_t errlen)
{
    unsigned mask;
    if (guard_parse(c->semantic_guards.v, c->semantic_guards.n, &mask, NULL, 0) < 0) {
        snprintf(err, errlen, "all and none must stand alone");
        return -1;
    }
    return 0;
}

static const struct conf_rule rules[] = {
    {.key = "semantic-guards", .check = check_word, .check_all = check_list},
};

int guard_add_conf_rules(void)
{
    return conf_add_rules(rules, PC_ARRAY_LEN(rules));
}
