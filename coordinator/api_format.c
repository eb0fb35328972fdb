/* api_format.c — `response_format` of a request → the grammar its output
 * must follow (docs/API.md, "Structured output").
 *
 * Pure, like api_request.c (which calls it once, from the sampling fields):
 * {type:"text"} is no constraint, {type:"json_object"} any JSON object,
 * {type:"json_schema", json_schema:{name, schema, strict, description}} the
 * schema compiled by core/grammar.  The compile happens here, in the HTTP
 * thread, so a schema whose keywords the compiler does not implement is a
 * 400 naming the keyword and where it is, before anything is queued; the
 * generation then only runs the grammar (requests.c, core/gen). */
#include "coordinator/api.h"

#include "core/grammar/grammar.h"
#include "core/util/err.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int type_error(struct api_error *e, const char *param, const char *what)
{
    return api_errorf(e, 400, "invalid_request_error", param, "invalid_type", "'%s' must be %s", param, what);
}

static const cJSON *present(const cJSON *o, const char *name)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    return cJSON_IsNull(v) ? NULL : v;
}

static int parse_json_schema(const cJSON *js, struct api_request *r, struct api_error *e)
{
    const char *P = "response_format.json_schema";
    if (!js) return api_errorf(e, 400, "invalid_request_error", P, "missing_required_parameter", "'%s' is required with type json_schema", P);
    if (!cJSON_IsObject(js)) return type_error(e, P, "an object");
    const cJSON *name = present(js, "name"), *schema = present(js, "schema"), *strict = present(js, "strict"), *desc = present(js, "description");
    if (!name)
        return api_errorf(e, 400, "invalid_request_error", "response_format.json_schema.name", "missing_required_parameter",
                          "'response_format.json_schema.name' is required");
    if (!cJSON_IsString(name)) return type_error(e, "response_format.json_schema.name", "a string");
    size_t n = strlen(name->valuestring);
    bool ok = n >= 1 && n <= 64;
    for (size_t i = 0; i < n && ok; i++) {
        char ch = name->valuestring[i];
        ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '_' || ch == '-';
    }
    if (!ok)
        return api_errorf(e, 400, "invalid_request_error", "response_format.json_schema.name", "invalid_value",
                          "'response_format.json_schema.name' must be 1-64 letters, digits, '_' or '-'");
    if (strict && !cJSON_IsBool(strict)) return type_error(e, "response_format.json_schema.strict", "true or false");
    if (desc && !cJSON_IsString(desc)) return type_error(e, "response_format.json_schema.description", "a string");
    if (!schema)
        return api_errorf(e, 400, "invalid_request_error", "response_format.json_schema.schema", "missing_required_parameter",
                          "'response_format.json_schema.schema' is required");
    if (!cJSON_IsObject(schema) && !cJSON_IsBool(schema)) return type_error(e, "response_format.json_schema.schema", "a JSON schema (an object)");
    char err[256], *text = cJSON_PrintUnformatted(schema);
    if (!text || !(r->grammar_key = malloc(strlen(text) + 13))) return free(text), api_errorf(e, 500, "server_error", NULL, NULL, "out of memory");
    memcpy(r->grammar_key, "json_schema:", 12), memcpy(r->grammar_key + 12, text, strlen(text) + 1);
    free(text);
    int rc = gram_from_schema(schema, &r->grammar, err, sizeof err);
    if (rc == NB_ENOMEM) return api_errorf(e, 500, "server_error", NULL, NULL, "out of memory");
    if (rc)
        return api_errorf(e, 400, "invalid_request_error", "response_format.json_schema.schema",
                          rc == NB_ENOTSUP ? "unsupported_schema" : "invalid_schema", "response_format.json_schema.schema: %s", err);
    return 0;
}

void api_format_free(struct api_request *r)
{
    gram_free(r->grammar), free(r->grammar_key);
    r->grammar = NULL, r->grammar_key = NULL;
}

int api_parse_format(const cJSON *root, struct api_request *r, struct api_error *e)
{
    const cJSON *f = present(root, "response_format");
    if (!f) return 0;
    if (!cJSON_IsObject(f)) return type_error(e, "response_format", "an object");
    const cJSON *type = present(f, "type");
    if (!type)
        return api_errorf(e, 400, "invalid_request_error", "response_format.type", "missing_required_parameter",
                          "'response_format.type' is required");
    if (!cJSON_IsString(type)) return type_error(e, "response_format.type", "a string");
    int rc = 0;
    char err[256];
    if (!strcmp(type->valuestring, "text")) return 0;
    if (!strcmp(type->valuestring, "json_object")) {
        if (gram_any_object(&r->grammar, err, sizeof err) || !(r->grammar_key = strdup("json_object")))
            return api_errorf(e, 500, "server_error", NULL, NULL, "out of memory");
    }
    else if (!strcmp(type->valuestring, "json_schema")) rc = parse_json_schema(present(f, "json_schema"), r, e);
    else
        return api_errorf(e, 400, "invalid_request_error", "response_format.type", "invalid_value",
                          "'response_format.type' is '%.40s'; it must be text, json_object or json_schema", type->valuestring);
    if (rc) return rc;
    /* A grammar whose start cannot be expanded (it cannot match anything) is the schema's fault. */
    gram_matcher *m;
    if (gram_matcher_new(r->grammar, NULL, &m, err, sizeof err))
        return api_errorf(e, 400, "invalid_request_error", "response_format", "invalid_schema", "response_format: %s", err);
    gram_matcher_free(m);
    return 0;
}
