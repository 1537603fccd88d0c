#include "server/config_file.h"

#include <yaml.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <memory>

namespace tessera::server {

namespace {

// PyYAML's safe_load resolves these plain scalars (YAML 1.1) to booleans and null.
std::optional<bool> yaml11_bool(const std::string& s) {
    for (const char* t : {"true", "True", "TRUE", "yes", "Yes", "YES", "on", "On", "ON"})
        if (s == t) return true;
    for (const char* f : {"false", "False", "FALSE", "no", "No", "NO", "off", "Off", "OFF"})
        if (s == f) return false;
    return std::nullopt;
}

bool yaml11_null(const std::string& s) { return s.empty() || s == "~" || s == "null" || s == "Null" || s == "NULL"; }

struct Document {
    yaml_document_t doc;
    ~Document() { yaml_document_delete(&doc); }
};

std::string scalar_text(yaml_node_t* node) {
    return std::string(reinterpret_cast<const char*>(node->data.scalar.value), node->data.scalar.length);
}

bool plain(yaml_node_t* node) { return node->data.scalar.style == YAML_PLAIN_SCALAR_STYLE; }

// A list item as Python's str() writes it after safe_load.
std::string item_text(yaml_node_t* node) {
    const std::string text = scalar_text(node);
    if (!plain(node)) return text;
    if (auto b = yaml11_bool(text)) return *b ? "True" : "False";
    if (yaml11_null(text)) return "None";
    return text;
}

}  // namespace

StatusOr<std::vector<ConfigEntry>> read_config_file(const std::string& path) {
    std::string suffix = std::filesystem::path(path).extension().string();
    std::transform(suffix.begin(), suffix.end(), suffix.begin(), [](unsigned char c) { return std::tolower(c); });
    if (suffix != ".yaml" && suffix != ".yml")
        return Status::InvalidArgument("Config file must be YAML format, got: " +
                                       std::filesystem::path(path).extension().string() + " (--config " + path + ")");
    std::unique_ptr<FILE, int (*)(FILE*)> file(std::fopen(path.c_str(), "rb"), &std::fclose);
    if (!file) return Status::NotFound("Config file not found: " + path);

    yaml_parser_t parser;
    yaml_parser_initialize(&parser);
    yaml_parser_set_input_file(&parser, file.get());
    Document document;
    const bool loaded = yaml_parser_load(&parser, &document.doc) != 0;
    if (!loaded) {
        std::string message = "Failed to read config file " + path + ": " +
                              (parser.problem ? parser.problem : "YAML error") + " at line " +
                              std::to_string(parser.problem_mark.line + 1) + ", column " +
                              std::to_string(parser.problem_mark.column + 1);
        yaml_parser_delete(&parser);
        // yaml_parser_load leaves the document uninitialised on failure.
        yaml_document_initialize(&document.doc, nullptr, nullptr, nullptr, 1, 1);
        return Status::InvalidArgument(message);
    }
    yaml_parser_delete(&parser);

    std::vector<ConfigEntry> entries;
    yaml_node_t* root = yaml_document_get_root_node(&document.doc);
    if (!root) return entries;  // an empty file is an empty mapping
    if (root->type == YAML_SCALAR_NODE && plain(root) && yaml11_null(scalar_text(root))) return entries;
    if (root->type != YAML_MAPPING_NODE)
        return Status::InvalidArgument("Config file must contain a dictionary at root level (--config " + path + ")");
    for (yaml_node_pair_t* pair = root->data.mapping.pairs.start; pair < root->data.mapping.pairs.top; ++pair) {
        yaml_node_t* key = yaml_document_get_node(&document.doc, pair->key);
        yaml_node_t* value = yaml_document_get_node(&document.doc, pair->value);
        if (key->type != YAML_SCALAR_NODE)
            return Status::InvalidArgument("--config " + path + ": every key must be a flag name");
        ConfigEntry entry;
        entry.key = scalar_text(key);
        if (value->type == YAML_MAPPING_NODE)
            return Status::InvalidArgument("--config " + path + ": '" + entry.key +
                                           "' holds a nested mapping; write it as a JSON string, e.g. '{\"a\": 1}'");
        if (value->type == YAML_SEQUENCE_NODE) {
            for (yaml_node_item_t* item = value->data.sequence.items.start; item < value->data.sequence.items.top;
                 ++item) {
                yaml_node_t* node = yaml_document_get_node(&document.doc, *item);
                if (node->type != YAML_SCALAR_NODE)
                    return Status::InvalidArgument("--config " + path + ": '" + entry.key +
                                                   "' lists a nested value; list plain values only");
                entry.values.push_back(item_text(node));
            }
        } else {
            const std::string text = scalar_text(value);
            if (plain(value)) entry.boolean = yaml11_bool(text);
            if (!entry.boolean) entry.values.push_back(plain(value) && yaml11_null(text) ? "None" : text);
        }
        entries.push_back(std::move(entry));
    }
    return entries;
}

}  // namespace tessera::server
