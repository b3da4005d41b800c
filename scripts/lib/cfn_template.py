"""template.yaml as CloudFormation sees it, for the offline checks
(scripts/deploy-check.sh, scripts/template-check.py). Run with the SAM
venv's python: cfn-lint's decoder (YAML short forms) and its SAM transform.

- `translated(**params)`: the template SAM-translated with these
  parameters, every condition and Fn::If resolved.
- `rule_functions_outside_aws(tpl)`, `failed_rules(tpl, **params)`: the
  `Rules` section read as CloudFormation reads it. AWS allows only `Ref`
  and the rule functions inside a rule (docs/aws-behaviours.md), and
  neither cfn-lint (it does not look inside `Assert`) nor moto (it ignores
  `Rules`) refuses anything else; CloudFormation refuses the whole change
  set.
"""
import copy

from cfnlint.decode import decode
from cfnlint.template.transforms._sam import Transform


# Fn::Not, Fn::And and Fn::Or, over conditions (`truth` evaluates one):
# the same in a template's Conditions and in its Rules.
LOGIC = {
    "Fn::Not": lambda truth, args: not truth(args[0]),
    "Fn::And": lambda truth, args: all(truth(a) for a in args),
    "Fn::Or": lambda truth, args: any(truth(a) for a in args),
}


def load(path="template.yaml"):
    tpl, errs = decode(path)
    assert not errs, errs
    return tpl


def translated(path="template.yaml", **params):
    """The template as CloudFormation receives it (SAM translated), with
    these parameters, then every condition and Fn::If resolved: its
    resources, and every parameter's value."""
    tpl = load(path)
    values = {k: str(v.get("Default", "")) for k, v in tpl["Parameters"].items()}
    values.update(params)
    sam = Transform(path, tpl, "us-east-1")
    for k, v in params.items():
        sam._parameters[k] = v
    assert not sam.transform_template(), "the SAM transform failed"
    out = copy.deepcopy(sam._template)
    conds = {}
    def cond(name):
        if name not in conds:
            conds[name] = truth(out["Conditions"][name])
        return conds[name]
    def value(node):
        if isinstance(node, dict) and list(node) == ["Ref"] and node["Ref"] in values:
            return values[node["Ref"]]
        if isinstance(node, dict) and list(node) == ["Fn::Join"]:
            sep, items = node["Fn::Join"]
            items = value(items)
            return sep.join(value(i) for i in items) if isinstance(items, list) else items
        if isinstance(node, dict) and list(node) == ["Fn::Select"]:
            i, items = node["Fn::Select"]
            return value(items)[int(i)]
        if isinstance(node, dict) and list(node) == ["Fn::Split"]:
            sep, text = node["Fn::Split"]
            return value(text).split(sep)
        return node
    def truth(node):
        (op, args), = node.items()
        if op == "Fn::Equals":
            a, b = (value(x) for x in args)
            a = ",".join(a) if isinstance(a, list) else a
            b = ",".join(b) if isinstance(b, list) else b
            return str(a) == str(b)
        if op in LOGIC:
            return LOGIC[op](truth, args)
        if op == "Condition":
            return cond(args)
        raise ValueError(node)
    NOVALUE = object()
    def resolve(node):
        if isinstance(node, dict):
            if list(node) == ["Fn::If"]:
                c, yes, no = node["Fn::If"]
                return resolve(yes if cond(c) else no)
            if node == {"Ref": "AWS::NoValue"}:
                return NOVALUE
            if list(node) == ["Ref"] and node["Ref"] in values:
                return values[node["Ref"]]
            if list(node) == ["Condition"] and isinstance(node["Condition"], str):
                return node
            return {k: v for k, v in ((k, resolve(v)) for k, v in node.items()) if v is not NOVALUE}
        if isinstance(node, list):
            return [v for v in (resolve(v) for v in node) if v is not NOVALUE]
        return node
    res = {k: r for k, r in out["Resources"].items() if "Condition" not in r or cond(r["Condition"])}
    return resolve(res), values


# https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/intrinsic-function-reference-rules.html
# ("Supported functions"): inside a rule's RuleCondition or Assert, only
# these and Ref (to a parameter or a pseudo parameter).
RULE_FUNCTIONS = {"Fn::And", "Fn::Contains", "Fn::EachMemberEquals", "Fn::EachMemberIn", "Fn::Equals", "Fn::Not",
                  "Fn::Or", "Fn::RefAll", "Fn::ValueOf", "Fn::ValueOfAll"}
PSEUDO = {"AWS::AccountId", "AWS::NotificationARNs", "AWS::NoValue", "AWS::Partition", "AWS::Region",
          "AWS::StackId", "AWS::StackName", "AWS::URLSuffix"}


def rule_functions_outside_aws(tpl):
    """Each function (or Ref) in a rule that CloudFormation refuses, as
    `Rule.Part: what`; Fn::And and Fn::Or take 2 to 10 conditions."""
    bad = []
    params = set(tpl.get("Parameters", {}))

    def walk(where, node):
        if isinstance(node, list):
            for item in node:
                walk(where, item)
        elif isinstance(node, dict):
            for key, arg in node.items():
                if key == "Ref":
                    if arg not in params and arg not in PSEUDO:
                        bad.append(f"{where}: Ref {arg} names no parameter")
                elif key not in RULE_FUNCTIONS:
                    bad.append(f"{where}: {key} (not a rule function)")
                elif key in ("Fn::And", "Fn::Or") and not (isinstance(arg, list) and 2 <= len(arg) <= 10):
                    bad.append(f"{where}: {key} takes 2 to 10 conditions")
                walk(where, arg)

    for name, rule in tpl.get("Rules", {}).items():
        walk(f"{name}.RuleCondition", rule.get("RuleCondition"))
        for i, assertion in enumerate(rule.get("Assertions", [])):
            walk(f"{name}.Assertions[{i}]", assertion.get("Assert"))
    return bad


def parameter_values(tpl, **params):
    """Each parameter's value as a rule sees it: a list for a
    CommaDelimitedList or List<...> type, else a string."""
    out = {}
    for name, p in tpl["Parameters"].items():
        text = str(params.get(name, p.get("Default", "")))
        listed = p["Type"] == "CommaDelimitedList" or p["Type"].startswith("List<")
        out[name] = [item.strip() for item in text.split(",")] if listed else text
    return out


def failed_rules(tpl, **params):
    """The rules CloudFormation would refuse these parameters by, each as
    (rule, its AssertDescription), evaluated with the documented semantics;
    a function outside the rule functions raises, as CloudFormation refuses
    the change set."""
    values = parameter_values(tpl, **params)

    def value(node):
        if isinstance(node, dict):
            (key, arg), = node.items()
            if key == "Ref":
                return values[arg]
            if key in RULE_FUNCTIONS:
                return truth(node)
            raise ValueError(f"{key} is not allowed in a rule")
        return node

    def text(node):
        v = value(node)
        if not isinstance(v, str):
            raise ValueError(f"Fn::Equals compares strings, not {v!r}")
        return v

    def strings(node):
        v = value(node)
        if not isinstance(v, list):
            raise ValueError(f"a list of strings expected, not {v!r}")
        return [str(x) for x in v]

    def truth(node):
        (op, args), = node.items()
        if op == "Fn::Equals":
            return text(args[0]) == text(args[1])
        if op in LOGIC:
            return LOGIC[op](truth, args)
        if op == "Fn::Contains":
            return text(args[1]) in strings(args[0])
        if op == "Fn::EachMemberEquals":
            return all(x == text(args[1]) for x in strings(args[0]))
        if op == "Fn::EachMemberIn":
            return set(strings(args[0])) <= set(strings(args[1]))
        raise ValueError(f"{op} needs the account (ValueOf, RefAll) or is not a rule function")

    failed = []
    for name, rule in tpl.get("Rules", {}).items():
        if "RuleCondition" in rule and not truth(rule["RuleCondition"]):
            continue
        for assertion in rule.get("Assertions", []):
            if not truth(assertion["Assert"]):
                failed.append((name, assertion.get("AssertDescription", "")))
    return failed
