#include "server/command_line.h"

#include <algorithm>

namespace tessera::server {

namespace {

bool starts_with(const std::string& s, const std::string& prefix) { return s.compare(0, prefix.size(), prefix) == 0; }

const KnownFlag* find_exact(const std::vector<KnownFlag>& known, const std::string& name) {
    auto it = std::find_if(known.begin(), known.end(), [&](const KnownFlag& f) { return f.name == name; });
    return it == known.end() ? nullptr : &*it;
}

}  // namespace

StatusOr<std::vector<std::string>> expand_abbreviations(const std::vector<std::string>& args,
                                                        const std::vector<KnownFlag>& known) {
    std::vector<std::string> out;
    out.reserve(args.size());
    bool next_is_value = false;
    for (std::size_t i = 0; i < args.size(); ++i) {
        const std::string& arg = args[i];
        if (!next_is_value && arg == "--") {
            out.insert(out.end(), args.begin() + static_cast<std::ptrdiff_t>(i), args.end());
            break;
        }
        if (next_is_value || !starts_with(arg, "--")) {
            next_is_value = false;
            out.push_back(arg);
            continue;
        }
        const auto eq = arg.find('=');
        const std::string name = arg.substr(0, eq);
        const std::string rest = eq == std::string::npos ? "" : arg.substr(eq);
        const KnownFlag* flag = find_exact(known, name);
        if (!flag) {
            std::vector<const KnownFlag*> candidates;
            for (const KnownFlag& f : known)
                if (starts_with(f.name, name)) candidates.push_back(&f);
            if (candidates.empty())
                return Status::InvalidArgument("unrecognized arguments: " + arg +
                                               " (not a flag of SGLang's launch_server; see --help)");
            if (candidates.size() > 1) {
                std::string matches;
                for (const KnownFlag* c : candidates) matches += (matches.empty() ? "" : ", ") + c->name;
                return Status::InvalidArgument("ambiguous option: " + name + " could match " + matches);
            }
            flag = candidates.front();
        }
        out.push_back(flag->name + rest);
        next_is_value = flag->takes_value && eq == std::string::npos;
    }
    return out;
}

}  // namespace tessera::server
