/* schema.c — a JSON schema → a grammar over bytes (grammar.h).
 *
 * One rule per schema, compiled depth first; the shared pieces (whitespace,
 * a string's character, digits, any JSON value) are made once per grammar.
 * The supported subset is closed: every keyword is either compiled, or an
 * annotation (title, description, …), or an error naming it and where it is
 * (a JSON pointer), so a schema is never enforced only in part.
 *
 * What is generated, by type:
 *   object  the properties in the schema's order, each optional one present
 *           or not; no other property (additionalProperties absent, true or
 *           false: what is generated is valid under all three).  Without
 *           properties and additionalProperties false: {}; without either:
 *           any object.
 *   array   items (any value when absent), minItems..maxItems of them.
 *   string  UTF-8 (the characters JSON allows unescaped, or the escapes;
 *           \u escapes of surrogates excluded, so one escape = one character),
 *           minLength..maxLength characters.
 *   number  -?(0|[1-9]d*)(.d+)?([eE][+-]?d+)?, integer without the fraction and
 *           exponent; at most GRAM_MAX_DIGITS digits a part, 3 in an exponent.
 *   enum, const  the values' JSON text (cJSON's), one alternative each.
 *   anyOf, type arrays  one alternative each.
 *   $ref    "#/$defs/NAME" or "#/definitions/NAME" of the root; recursion
 *           allowed when something is consumed before it recurs. */
#include "core/grammar/gram_internal.h"

#include "core/util/err.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DEPTH 64  /* schema nesting */
#define MAX_DEFS 256

struct sc {
    struct gram_build *b;
    const cJSON *root;
    char *err;
    size_t errlen;
    int rc;
    uint32_t ws, str_char, str_any, number, integer, any[GRAM_ANY_DEPTH + 1];
    uint32_t any_obj[GRAM_ANY_DEPTH + 1];
    /* $defs compiled so far: the name's node and its rule; head[] = the defs entered with nothing consumed since */
    const cJSON *def_node[MAX_DEFS];
    uint32_t def_rule[MAX_DEFS];
    int n_defs;
    const cJSON *head[MAX_DEFS];
    int n_head;
};

static int fail(struct sc *c, int code, const char *path, const char *fmt, const char *what)
{
    if (!c->rc) {
        char msg[256];
        snprintf(msg, sizeof msg, fmt, what);
        c->rc = nb_errf(c->err, c->errlen, code, "%s at %s", msg, path[0] ? path : "the schema's root");
    }
    return c->rc;
}

/* ---------- shared pieces ---------- */

/* CHAIN_k ::= ε | X CHAIN_{k-1}: up to k of X, X rule x or (set non-NULL)
 * one byte of the 256-bit set: a chain of k + 1 rules, the last returned. */
static uint32_t chain(struct sc *c, uint32_t x, const uint64_t *set, int k)
{
    uint32_t prev = gb_rule(c->b);
    gb_alt(c->b, prev);
    for (int i = 1; i <= k; i++) {
        uint32_t r = gb_rule(c->b), a;
        gb_alt(c->b, r);
        a = gb_alt(c->b, r);
        if (set) gb_set(c->b, a, set);
        else gb_ref(c->b, a, x);
        gb_ref(c->b, a, prev);
        prev = r;
    }
    return prev;
}

/* WS ::= ε | [ \t\n\r] WS' with at most GRAM_MAX_WS bytes. */
static uint32_t make_ws(struct sc *c)
{
    const uint64_t set[4] = {1ull << ' ' | 1ull << '\t' | 1ull << '\n' | 1ull << '\r'};
    return chain(c, 0, set, GRAM_MAX_WS);
}

static void alt_ranges(struct sc *c, uint32_t rule, const unsigned char (*rg)[2], int n)
{
    uint32_t a = gb_alt(c->b, rule);
    for (int i = 0; i < n; i++) gb_range(c->b, a, rg[i][0], rg[i][1]);
}

/* One character of a JSON string's contents: a UTF-8 scalar other than '"',
 * '\' and the control characters, or an escape. */
static uint32_t make_str_char(struct sc *c)
{
    struct gram_build *b = c->b;
    uint32_t ch = gb_rule(b), a;
    a = gb_alt(b, ch);
    uint64_t plain[4] = {0};
    for (unsigned x = 0x20; x < 0x80; x++)
        if (x != '"' && x != '\\') plain[x >> 6] |= 1ull << (x & 63);
    gb_set(b, a, plain);
    static const unsigned char u2[][2] = {{0xC2, 0xDF}, {0x80, 0xBF}}, u3a[][2] = {{0xE0, 0xE0}, {0xA0, 0xBF}, {0x80, 0xBF}},
                               u3b[][2] = {{0xE1, 0xEC}, {0x80, 0xBF}, {0x80, 0xBF}}, u3c[][2] = {{0xED, 0xED}, {0x80, 0x9F}, {0x80, 0xBF}},
                               u3d[][2] = {{0xEE, 0xEF}, {0x80, 0xBF}, {0x80, 0xBF}},
                               u4a[][2] = {{0xF0, 0xF0}, {0x90, 0xBF}, {0x80, 0xBF}, {0x80, 0xBF}},
                               u4b[][2] = {{0xF1, 0xF3}, {0x80, 0xBF}, {0x80, 0xBF}, {0x80, 0xBF}},
                               u4c[][2] = {{0xF4, 0xF4}, {0x80, 0x8F}, {0x80, 0xBF}, {0x80, 0xBF}};
    alt_ranges(c, ch, u2, 2), alt_ranges(c, ch, u3a, 3), alt_ranges(c, ch, u3b, 3), alt_ranges(c, ch, u3c, 3);
    alt_ranges(c, ch, u3d, 3), alt_ranges(c, ch, u4a, 4), alt_ranges(c, ch, u4b, 4), alt_ranges(c, ch, u4c, 4);
    /* Escapes: \" \\ \/ \b \f \n \r \t, and \uXXXX outside D800-DFFF. */
    a = gb_alt(b, ch);
    gb_lit(b, a, "\\", 1);
    uint64_t esc[4] = {0};
    for (const char *p = "\"\\/bfnrt"; *p; p++) esc[(unsigned char)*p >> 6] |= 1ull << (*p & 63);
    gb_set(b, a, esc);
    uint64_t hex[4] = {0}, lead[4] = {0}, d[4] = {0}, oct[4] = {0};
    for (const char *p = "0123456789abcdefABCDEF"; *p; p++) hex[*p >> 6] |= 1ull << (*p & 63);
    for (const char *p = "0123456789abcefABCEF"; *p; p++) lead[*p >> 6] |= 1ull << (*p & 63);
    for (const char *p = "dD"; *p; p++) d[*p >> 6] |= 1ull << (*p & 63);
    for (const char *p = "01234567"; *p; p++) oct[*p >> 6] |= 1ull << (*p & 63);
    a = gb_alt(b, ch);
    gb_lit(b, a, "\\u", 2), gb_set(b, a, lead), gb_set(b, a, hex), gb_set(b, a, hex), gb_set(b, a, hex);
    a = gb_alt(b, ch);
    gb_lit(b, a, "\\u", 2), gb_set(b, a, d), gb_set(b, a, oct), gb_set(b, a, hex), gb_set(b, a, hex);
    return ch;
}

/* OPT_k ::= ε | X OPT_{k-1}: up to k more of rule x.  Chains of the same x
 * are made once per count (the digits' are kept in digits_opt). */
static uint32_t up_to(struct sc *c, uint32_t x, int k) { return chain(c, x, NULL, k); }

/* X* as MANY ::= ε | X MANY. */
static uint32_t many(struct sc *c, uint32_t x)
{
    uint32_t r = gb_rule(c->b), a;
    gb_alt(c->b, r);
    a = gb_alt(c->b, r);
    gb_ref(c->b, a, x), gb_ref(c->b, a, r);
    return r;
}

/* A string of min..max characters (max < 0: unbounded). */
static uint32_t make_string(struct sc *c, long min, long max)
{
    if (min == 0 && max < 0 && c->str_any) return c->str_any;
    uint32_t r = gb_rule(c->b), a = gb_alt(c->b, r);
    uint32_t tail = max < 0 ? many(c, c->str_char) : up_to(c, c->str_char, (int)(max - min));
    gb_lit(c->b, a, "\"", 1);
    for (long i = 0; i < min; i++) gb_ref(c->b, a, c->str_char);
    gb_ref(c->b, a, tail);
    gb_lit(c->b, a, "\"", 1);
    if (min == 0 && max < 0) c->str_any = r;
    return r;
}

static uint32_t make_number(struct sc *c, bool integer)
{
    struct gram_build *b = c->b;
    uint32_t digit = gb_rule(b), a;
    gb_range(b, gb_alt(b, digit), '0', '9');
    uint32_t opt15 = up_to(c, digit, GRAM_MAX_DIGITS - 1), opt2 = up_to(c, digit, 2);
    uint32_t ip = gb_rule(b); /* -?(0|[1-9]d{0,15}) */
    for (int neg = 0; neg < 2; neg++) {
        a = gb_alt(b, ip);
        if (neg) gb_lit(b, a, "-", 1);
        gb_lit(b, a, "0", 1);
        a = gb_alt(b, ip);
        if (neg) gb_lit(b, a, "-", 1);
        gb_range(b, a, '1', '9'), gb_ref(b, a, opt15);
    }
    if (integer) return ip;
    uint32_t frac = gb_rule(b), exp = gb_rule(b), num = gb_rule(b);
    gb_alt(b, frac);
    a = gb_alt(b, frac);
    gb_lit(b, a, ".", 1), gb_ref(b, a, digit), gb_ref(b, a, opt15);
    gb_alt(b, exp);
    uint64_t e[4] = {0}, sign[4] = {0};
    e[1] |= 1ull << ('e' - 64) | 1ull << ('E' - 64);
    sign[0] |= 1ull << '+' | 1ull << '-';
    a = gb_alt(b, exp);
    gb_set(b, a, e), gb_ref(b, a, digit), gb_ref(b, a, opt2);
    a = gb_alt(b, exp);
    gb_set(b, a, e), gb_set(b, a, sign), gb_ref(b, a, digit), gb_ref(b, a, opt2);
    a = gb_alt(b, num);
    gb_ref(b, a, ip), gb_ref(b, a, frac), gb_ref(b, a, exp);
    return num;
}

static uint32_t literal_rule(struct sc *c, const char *s)
{
    uint32_t r = gb_rule(c->b);
    gb_lit(c->b, gb_alt(c->b, r), s, strlen(s));
    return r;
}

/* "{" WS (ITEM (WS "," WS ITEM)*)? WS "}" with one ITEM rule; open/close the brackets. */
static uint32_t make_list(struct sc *c, char open, char close, uint32_t item, long min, long max)
{
    struct gram_build *b = c->b;
    uint32_t r = gb_rule(b), a;
    char o[1] = {open}, cl[1] = {close};
    if (min == 0) {
        a = gb_alt(b, r);
        gb_lit(b, a, o, 1), gb_ref(b, a, c->ws), gb_lit(b, a, cl, 1);
    }
    if (max == 0) return r;
    uint32_t sep_item = gb_rule(b);
    a = gb_alt(b, sep_item);
    gb_ref(b, a, c->ws), gb_lit(b, a, ",", 1), gb_ref(b, a, c->ws), gb_ref(b, a, item);
    long first = min > 0 ? min : 1;
    uint32_t tail = max < 0 ? many(c, sep_item) : up_to(c, sep_item, (int)(max - first));
    a = gb_alt(b, r);
    gb_lit(b, a, o, 1), gb_ref(b, a, c->ws), gb_ref(b, a, item);
    for (long i = 1; i < first; i++) gb_ref(b, a, sep_item);
    gb_ref(b, a, tail), gb_ref(b, a, c->ws), gb_lit(b, a, cl, 1);
    return r;
}

/* Any JSON value nested at most depth more levels; any_obj[depth] its objects. */
static uint32_t make_any(struct sc *c, int depth)
{
    if (c->any[depth]) return c->any[depth];
    struct gram_build *b = c->b;
    uint32_t r = gb_rule(b);
    static const char *const scalars[] = {"true", "false", "null"};
    for (int i = 0; i < 3; i++) gb_lit(b, gb_alt(b, r), scalars[i], strlen(scalars[i]));
    gb_ref(b, gb_alt(b, r), make_string(c, 0, -1));
    gb_ref(b, gb_alt(b, r), c->number);
    if (depth > 0) {
        uint32_t inner = make_any(c, depth - 1), member = gb_rule(b), a = gb_alt(b, member);
        gb_ref(b, a, make_string(c, 0, -1)), gb_ref(b, a, c->ws), gb_lit(b, a, ":", 1), gb_ref(b, a, c->ws), gb_ref(b, a, inner);
        c->any_obj[depth] = make_list(c, '{', '}', member, 0, -1);
        gb_ref(b, gb_alt(b, r), c->any_obj[depth]);
        gb_ref(b, gb_alt(b, r), make_list(c, '[', ']', inner, 0, -1));
    }
    return c->any[depth] = r;
}

/* ---------- schemas ---------- */

static bool in_list(const char *s, const char *const *list)
{
    for (; *list; list++)
        if (!strcmp(s, *list)) return true;
    return false;
}

static const char *const annotations[] = {"title", "description", "$schema", "$id", "$comment", "default", "examples",
                                          "deprecated", "readOnly", "writeOnly", "$defs", "definitions", NULL};
static const char *const compiled[] = {"type", "enum", "const", "anyOf", "$ref", "properties", "required", "additionalProperties",
                                       "items", "minItems", "maxItems", "minLength", "maxLength", NULL};
static const char *const types[] = {"object", "array", "string", "number", "integer", "boolean", "null", NULL};

static uint32_t compile(struct sc *c, const cJSON *s, const char *path, int depth);

/* A count keyword: absent → dflt, else an integer in [0, GRAM_MAX_COUNT]. */
static long count_kw(struct sc *c, const cJSON *s, const char *name, long dflt, const char *path)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(s, name);
    if (!v) return dflt;
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < 0)
        return fail(c, NB_EINVAL, path, "'%s' must be a non-negative integer", name), dflt;
    if (v->valuedouble > GRAM_MAX_COUNT) {
        char what[96];
        snprintf(what, sizeof what, "'%s' over %d", name, GRAM_MAX_COUNT);
        return fail(c, NB_ENOTSUP, path, "%s is not supported", what), dflt;
    }
    return (long)v->valuedouble;
}

static void child_path(char *out, size_t n, const char *path, const char *kw, const char *key)
{
    /* JSON pointer escaping: ~ → ~0, / → ~1 (keys cut at 48 bytes in messages). */
    int k = snprintf(out, n, "%s/%s", path, kw);
    if (key && k > 0 && (size_t)k < n) {
        size_t at = (size_t)k;
        if (at + 1 < n) out[at++] = '/';
        for (int i = 0; key[i] && i < 48 && at + 3 < n; i++) {
            if (key[i] == '~') out[at++] = '~', out[at++] = '0';
            else if (key[i] == '/') out[at++] = '~', out[at++] = '1';
            else out[at++] = key[i];
        }
        out[at] = 0;
    }
}

static uint32_t compile_object(struct sc *c, const cJSON *s, const char *path, int depth)
{
    struct gram_build *b = c->b;
    const cJSON *props = cJSON_GetObjectItemCaseSensitive(s, "properties"), *req = cJSON_GetObjectItemCaseSensitive(s, "required");
    const cJSON *addl = cJSON_GetObjectItemCaseSensitive(s, "additionalProperties"), *p;
    char sub[512];
    if (props && !cJSON_IsObject(props)) return fail(c, NB_EINVAL, path, "'%s' must be an object", "properties"), 0;
    if (req && !cJSON_IsArray(req)) return fail(c, NB_EINVAL, path, "'%s' must be an array of strings", "required"), 0;
    if (addl && !cJSON_IsBool(addl)) {
        child_path(sub, sizeof sub, path, "additionalProperties", NULL);
        return fail(c, NB_ENOTSUP, sub, "'%s' as a schema is not supported (only true or false)", "additionalProperties"), 0;
    }
    cJSON_ArrayForEach(p, req)
    {
        if (!cJSON_IsString(p)) return fail(c, NB_EINVAL, path, "'%s' must be an array of strings", "required"), 0;
        if (!cJSON_GetObjectItemCaseSensitive(props, p->valuestring)) {
            char what[96];
            snprintf(what, sizeof what, "'required' names '%.48s'", p->valuestring);
            return fail(c, NB_ENOTSUP, path, "%s, which is not in 'properties' (additional properties are never generated)", what), 0;
        }
    }
    int n = props ? cJSON_GetArraySize(props) : 0;
    if (n == 0) {
        if (cJSON_IsFalse(addl)) return make_list(c, '{', '}', 0, 0, 0);
        return make_any(c, GRAM_ANY_DEPTH), c->any_obj[GRAM_ANY_DEPTH];
    }
    /* first[i] / rest[i]: properties i.. with / without one present before. */
    uint32_t *first = malloc(((size_t)n + 1) * 2 * sizeof *first);
    if (!first) return fail(c, NB_ENOMEM, path, "%s", "out of memory"), 0;
    uint32_t *rest = first + n + 1;
    for (int i = 0; i <= n; i++) first[i] = gb_rule(b), rest[i] = gb_rule(b);
    gb_alt(b, first[n]), gb_alt(b, rest[n]);
    int i = 0;
    cJSON_ArrayForEach(p, props)
    {
        bool required = false;
        const cJSON *q;
        cJSON_ArrayForEach(q, req) required |= cJSON_IsString(q) && !strcmp(q->valuestring, p->string);
        child_path(sub, sizeof sub, path, "properties", p->string);
        uint32_t value = compile(c, p, sub, depth + 1), prop = gb_rule(b), a;
        cJSON *ks = cJSON_CreateString(p->string);
        char *kt = ks ? cJSON_PrintUnformatted(ks) : NULL;
        cJSON_Delete(ks);
        if (!kt) {
            free(first);
            return fail(c, NB_ENOMEM, path, "%s", "out of memory"), 0;
        }
        a = gb_alt(b, prop);
        gb_lit(b, a, kt, strlen(kt)), gb_ref(b, a, c->ws), gb_lit(b, a, ":", 1), gb_ref(b, a, c->ws), gb_ref(b, a, value);
        free(kt);
        a = gb_alt(b, first[i]);
        gb_ref(b, a, prop), gb_ref(b, a, rest[i + 1]);
        a = gb_alt(b, rest[i]);
        gb_ref(b, a, c->ws), gb_lit(b, a, ",", 1), gb_ref(b, a, c->ws), gb_ref(b, a, prop), gb_ref(b, a, rest[i + 1]);
        if (!required) gb_ref(b, gb_alt(b, first[i]), first[i + 1]), gb_ref(b, gb_alt(b, rest[i]), rest[i + 1]);
        i++;
    }
    uint32_t r = gb_rule(b), a = gb_alt(b, r);
    gb_lit(b, a, "{", 1), gb_ref(b, a, c->ws), gb_ref(b, a, first[0]), gb_ref(b, a, c->ws), gb_lit(b, a, "}", 1);
    free(first);
    return r;
}

static uint32_t compile_array(struct sc *c, const cJSON *s, const char *path, int depth)
{
    const cJSON *items = cJSON_GetObjectItemCaseSensitive(s, "items");
    char sub[512];
    child_path(sub, sizeof sub, path, "items", NULL);
    if (items && !cJSON_IsObject(items) && !cJSON_IsTrue(items))
        return fail(c, NB_ENOTSUP, sub, "'%s' must be a schema object (arrays of schemas, false: not supported)", "items"), 0;
    long min = count_kw(c, s, "minItems", 0, path), max = count_kw(c, s, "maxItems", -1, path);
    if (max >= 0 && min > max) return fail(c, NB_EINVAL, path, "%s", "'minItems' is over 'maxItems'"), 0;
    /* The item's state is reset by the array's brackets: a $ref cycle through items consumes. */
    int head = c->n_head;
    c->n_head = 0;
    uint32_t item = items && cJSON_IsObject(items) ? compile(c, items, sub, depth + 1) : make_any(c, GRAM_ANY_DEPTH);
    c->n_head = head;
    return make_list(c, '[', ']', item, min, max);
}

/* The schema restricted to one type. */
static uint32_t compile_type(struct sc *c, const cJSON *s, const char *type, const char *path, int depth)
{
    if (!strcmp(type, "object")) {
        int head = c->n_head;
        c->n_head = 0;
        uint32_t r = compile_object(c, s, path, depth);
        c->n_head = head;
        return r;
    }
    if (!strcmp(type, "array")) return compile_array(c, s, path, depth);
    if (!strcmp(type, "string")) {
        long min = count_kw(c, s, "minLength", 0, path), max = count_kw(c, s, "maxLength", -1, path);
        if (max >= 0 && min > max) return fail(c, NB_EINVAL, path, "%s", "'minLength' is over 'maxLength'"), 0;
        return make_string(c, min, max);
    }
    if (!strcmp(type, "number")) return c->number;
    if (!strcmp(type, "integer")) return c->integer;
    if (!strcmp(type, "boolean")) {
        uint32_t r = gb_rule(c->b);
        gb_lit(c->b, gb_alt(c->b, r), "true", 4), gb_lit(c->b, gb_alt(c->b, r), "false", 5);
        return r;
    }
    return literal_rule(c, "null");
}

static bool value_has_type(const cJSON *v, const char *type)
{
    if (!strcmp(type, "object")) return cJSON_IsObject(v);
    if (!strcmp(type, "array")) return cJSON_IsArray(v);
    if (!strcmp(type, "string")) return cJSON_IsString(v);
    if (!strcmp(type, "number")) return cJSON_IsNumber(v);
    if (!strcmp(type, "integer")) return cJSON_IsNumber(v) && v->valuedouble == floor(v->valuedouble);
    if (!strcmp(type, "boolean")) return cJSON_IsBool(v);
    return cJSON_IsNull(v);
}

/* enum / const: their JSON texts, those of the schema's type(s) when it has one. */
static uint32_t compile_values(struct sc *c, const cJSON *s, const cJSON *type, const char *path)
{
    const cJSON *en = cJSON_GetObjectItemCaseSensitive(s, "enum"), *cn = cJSON_GetObjectItemCaseSensitive(s, "const"), *v;
    if (en && cn) return fail(c, NB_ENOTSUP, path, "%s", "'enum' and 'const' together are not supported"), 0;
    if (en && (!cJSON_IsArray(en) || !cJSON_GetArraySize(en))) return fail(c, NB_EINVAL, path, "'%s' must be a non-empty array", "enum"), 0;
    uint32_t r = gb_rule(c->b);
    int kept = 0;
    for (v = en ? en->child : cn; v; v = en ? v->next : NULL) {
        bool ok = !type;
        if (cJSON_IsString(type)) ok = value_has_type(v, type->valuestring);
        const cJSON *t;
        if (cJSON_IsArray(type)) cJSON_ArrayForEach(t, type) ok |= cJSON_IsString(t) && value_has_type(v, t->valuestring);
        if (!ok) continue;
        char *text = cJSON_PrintUnformatted(v);
        if (!text) return fail(c, NB_ENOMEM, path, "%s", "out of memory"), 0;
        gb_lit(c->b, gb_alt(c->b, r), text, strlen(text));
        free(text);
        kept++;
    }
    if (!kept) return fail(c, NB_EINVAL, path, "%s", "no value of 'enum'/'const' has the schema's 'type'"), 0;
    return r;
}

/* "#/$defs/NAME" or "#/definitions/NAME" → that schema's rule (compiled once). */
static uint32_t compile_ref(struct sc *c, const cJSON *ref, const char *path, int depth)
{
    if (!cJSON_IsString(ref)) return fail(c, NB_EINVAL, path, "'%s' must be a string", "$ref"), 0;
    const char *r = ref->valuestring, *name = NULL, *kw = NULL;
    if (!strncmp(r, "#/$defs/", 8)) kw = "$defs", name = r + 8;
    else if (!strncmp(r, "#/definitions/", 14)) kw = "definitions", name = r + 14;
    if (!name || strchr(name, '/') || strchr(name, '~')) {
        char what[96];
        snprintf(what, sizeof what, "'$ref' \"%.48s\"", r);
        return fail(c, NB_ENOTSUP, path, "%s is not supported (only \"#/$defs/NAME\" and \"#/definitions/NAME\")", what), 0;
    }
    const cJSON *target = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(c->root, kw), name);
    if (!target) {
        char what[96];
        snprintf(what, sizeof what, "'$ref' \"%.48s\"", r);
        return fail(c, NB_EINVAL, path, "%s names no schema of the root", what), 0;
    }
    for (int i = 0; i < c->n_head; i++)
        if (c->head[i] == target) return fail(c, NB_ENOTSUP, path, "%s", "a '$ref' cycle that nothing is generated in is not supported"), 0;
    for (int i = 0; i < c->n_defs; i++)
        if (c->def_node[i] == target) return c->def_rule[i];
    if (c->n_defs >= MAX_DEFS || c->n_head >= MAX_DEFS) return fail(c, NB_ENOTSUP, path, "%s", "more than 256 '$ref' targets are not supported"), 0;
    /* The rule exists before its body, so the body may refer back to it. */
    uint32_t rule = gb_rule(c->b), a = gb_alt(c->b, rule);
    c->def_node[c->n_defs] = target, c->def_rule[c->n_defs++] = rule;
    char sub[512];
    snprintf(sub, sizeof sub, "/%s/%.48s", kw, name);
    c->head[c->n_head++] = target;
    gb_ref(c->b, a, compile(c, target, sub, depth + 1));
    c->n_head--;
    return rule;
}

static uint32_t compile(struct sc *c, const cJSON *s, const char *path, int depth)
{
    if (c->rc) return 0;
    if (depth > MAX_DEPTH) return fail(c, NB_ENOTSUP, path, "schemas nested over %s levels are not supported", "64"), 0;
    if (cJSON_IsTrue(s)) return make_any(c, GRAM_ANY_DEPTH);
    if (cJSON_IsFalse(s)) return fail(c, NB_ENOTSUP, path, "%s", "the schema false (nothing is valid) is not supported"), 0;
    if (!cJSON_IsObject(s)) return fail(c, NB_EINVAL, path, "%s", "a schema must be an object or a boolean"), 0;
    const cJSON *k;
    bool special = false, other = false;
    cJSON_ArrayForEach(k, s)
    {
        if (in_list(k->string, annotations)) continue;
        if (!in_list(k->string, compiled)) {
            char what[96];
            snprintf(what, sizeof what, "'%.48s'", k->string);
            return fail(c, NB_ENOTSUP, path, "%s is not supported", what), 0;
        }
        if (!strcmp(k->string, "enum") || !strcmp(k->string, "const") || !strcmp(k->string, "anyOf") || !strcmp(k->string, "$ref"))
            special = true;
        else if (strcmp(k->string, "type")) other = true;
    }
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(s, "type"), *t;
    if (type) {
        bool ok = cJSON_IsString(type) || (cJSON_IsArray(type) && cJSON_GetArraySize(type) > 0);
        if (cJSON_IsString(type)) ok = in_list(type->valuestring, types);
        if (cJSON_IsArray(type)) cJSON_ArrayForEach(t, type) ok &= cJSON_IsString(t) && in_list(t->valuestring, types);
        if (!ok) return fail(c, NB_EINVAL, path, "%s", "'type' must be one of object, array, string, number, integer, boolean, null (or a list of them)"), 0;
    }
    if (special) {
        const char *which = cJSON_GetObjectItemCaseSensitive(s, "anyOf") ? "anyOf" : cJSON_GetObjectItemCaseSensitive(s, "$ref") ? "$ref" : NULL;
        if (other || (which && type)) {
            char what[96];
            snprintf(what, sizeof what, "'%s' beside other keywords", which ? which : "enum/const");
            return fail(c, NB_ENOTSUP, path, "%s is not supported", what), 0;
        }
        if (which && !strcmp(which, "$ref")) return compile_ref(c, cJSON_GetObjectItemCaseSensitive(s, "$ref"), path, depth);
        if (!which) return compile_values(c, s, type, path);
        const cJSON *any = cJSON_GetObjectItemCaseSensitive(s, "anyOf");
        if (!cJSON_IsArray(any) || !cJSON_GetArraySize(any)) return fail(c, NB_EINVAL, path, "'%s' must be a non-empty array", "anyOf"), 0;
        uint32_t r = gb_rule(c->b);
        int i = 0;
        cJSON_ArrayForEach(t, any)
        {
            char sub[512];
            snprintf(sub, sizeof sub, "%s/anyOf/%d", path, i++);
            gb_ref(c->b, gb_alt(c->b, r), compile(c, t, sub, depth + 1));
        }
        return r;
    }
    if (!type) { /* the type the keywords imply, else any value */
        if (cJSON_GetObjectItemCaseSensitive(s, "properties") || cJSON_GetObjectItemCaseSensitive(s, "required") ||
            cJSON_GetObjectItemCaseSensitive(s, "additionalProperties"))
            return compile_type(c, s, "object", path, depth);
        if (cJSON_GetObjectItemCaseSensitive(s, "items") || cJSON_GetObjectItemCaseSensitive(s, "minItems") ||
            cJSON_GetObjectItemCaseSensitive(s, "maxItems"))
            return compile_type(c, s, "array", path, depth);
        if (cJSON_GetObjectItemCaseSensitive(s, "minLength") || cJSON_GetObjectItemCaseSensitive(s, "maxLength"))
            return compile_type(c, s, "string", path, depth);
        return make_any(c, GRAM_ANY_DEPTH);
    }
    if (cJSON_IsString(type)) return compile_type(c, s, type->valuestring, path, depth);
    uint32_t r = gb_rule(c->b);
    cJSON_ArrayForEach(t, type) gb_ref(c->b, gb_alt(c->b, r), compile_type(c, s, t->valuestring, path, depth));
    return r;
}

/* The grammar's start: WS value WS, the whitespace around the value bounded
 * as everywhere (so after the value only a stop id is left, soon). */
static int finish(struct sc *c, uint32_t value, gram_grammar **out, char *err, size_t errlen)
{
    if (c->rc) return gb_free(c->b), c->rc;
    uint32_t root = gb_rule(c->b), a = gb_alt(c->b, root);
    gb_ref(c->b, a, c->ws), gb_ref(c->b, a, value), gb_ref(c->b, a, c->ws);
    return gb_finish(c->b, root, out, err, errlen);
}

static int begin(struct sc *c, char *err, size_t errlen)
{
    memset(c, 0, sizeof *c);
    c->err = err, c->errlen = errlen;
    if (!(c->b = gb_new())) return nb_errf(err, errlen, NB_ENOMEM, "out of memory");
    c->ws = make_ws(c);
    c->str_char = make_str_char(c);
    c->number = make_number(c, false);
    c->integer = make_number(c, true);
    return 0;
}

int gram_from_schema(const cJSON *schema, gram_grammar **out, char *err, size_t errlen)
{
    *out = NULL;
    struct sc c;
    int rc = begin(&c, err, errlen);
    if (rc) return rc;
    c.root = schema;
    uint32_t v = compile(&c, schema, "", 0);
    return finish(&c, v, out, err, errlen);
}

int gram_any_object(gram_grammar **out, char *err, size_t errlen)
{
    *out = NULL;
    struct sc c;
    int rc = begin(&c, err, errlen);
    if (rc) return rc;
    make_any(&c, GRAM_ANY_DEPTH);
    return finish(&c, c.any_obj[GRAM_ANY_DEPTH], out, err, errlen);
}
