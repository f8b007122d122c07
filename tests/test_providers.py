"""The provider table (modelspec.PROVIDERS) and each of its readers: get_model makes the
class a row names, keys redacts every row's key, modelspec checks every row's names and
options, models/limits.py reads every row's rate-limit headers. A row one of them misses
fails here."""

from importlib import import_module

import pytest

from agentctl import keys, modelspec
from agentctl.errors import UsageError
from agentctl.models import Model, get_model, limits
from agentctl.models.api import HTTPModel
from agentctl.models.openai import OpenAIModel
from agentctl.modelspec import PROVIDERS, provider_row

rows = pytest.mark.parametrize("row", PROVIDERS, ids=lambda row: row.name)
APIS = [row for row in PROVIDERS if row.key]


def example(row):
    """A name of one of the row's models."""
    return row.name if ":" not in row.names else f"{row.name}:some-model"


@rows
def test_every_row_names_a_model_class(row):
    model_class = getattr(import_module(row.module), row.model_class)
    assert isinstance(model_class, type) and issubclass(model_class, Model)
    # An API has a key, a base URL's variable and its default; an offline model none.
    api = (row.key, row.url_variable, row.url)
    assert all(api) == issubclass(model_class, HTTPModel) and (all(api) or not any(api))


@rows
def test_get_model_makes_the_class_of_the_row(row):
    model = get_model(example(row))
    assert type(model) is getattr(import_module(row.module), row.model_class)
    assert model.name == example(row)
    if isinstance(model, HTTPModel):
        assert model.row is row and model.provider == row.name


def test_the_keys_redacted_are_the_rows_keys(monkeypatch):
    assert keys.VARIABLES == tuple(row.key for row in APIS)
    for row in APIS:
        monkeypatch.setenv(row.key, f"secret-of-{row.name}-0123456789")
        assert keys.redact(f"said secret-of-{row.name}-0123456789.") == "said ***."


@rows
def test_modelspec_checks_the_rows_names_and_options(row):
    modelspec.check_name(example(row))
    assert row.names in modelspec.EXPECTED
    assert modelspec.known_options(example(row)) == (
        row.options if row.options is not None
        else {k: v for r in PROVIDERS if r.options for k, v in r.options.items()})
    with pytest.raises(UsageError):
        modelspec.check_name(row.name + ("" if ":" in row.names else ":x"))


@pytest.mark.parametrize("row", [row for row in PROVIDERS if row.limits], ids=lambda r: r.name)
def test_every_rows_rate_limit_headers_are_read(row):
    def header(field, kind):
        return row.limits.format(field=field, kind=kind).lower()

    said = {header("limit", "requests"): "60", header("remaining", "requests"): "3",
            header("reset", "requests"): "57", header("limit", "tokens"): "1000",
            header("remaining", "tokens"): "10", header("reset", "tokens"): "6"}
    read = limits.read(200, said, 0.0)
    assert (read.requests.limit, read.requests.remaining, read.requests.reset) == (60, 3, 57.0)
    assert (read.tokens.limit, read.tokens.remaining, read.tokens.reset) == (1000, 10, 6.0)


def test_a_provider_is_its_row(monkeypatch):
    """A provider that speaks another's API is a row alone: its name, its key, its URL."""
    row = provider_row("mistral", "mistral:NAME", "agentctl.models.openai", "OpenAIModel",
                       key="MISTRAL_API_KEY", url_variable="MISTRAL_BASE_URL",
                       url="https://api.mistral.ai/v1", options=modelspec.CHAT_COMPLETIONS,
                       limits="x-ratelimit-{field}-{kind}")
    monkeypatch.setitem(modelspec.BY_NAME, "mistral", row)
    model = get_model("mistral:mistral-large-latest")
    assert type(model) is OpenAIModel and model.name == "mistral:mistral-large-latest"
    with pytest.raises(UsageError, match="MISTRAL_API_KEY is not set"):
        model.check()
    monkeypatch.setenv("MISTRAL_API_KEY", "k" * 20)
    identity = model.identity()
    assert (identity.provider, identity.url) == ("mistral", "https://api.mistral.ai/v1")
    monkeypatch.setenv("MISTRAL_BASE_URL", "http://127.0.0.1:9/v1/")
    assert model.endpoint().url == "http://127.0.0.1:9/v1"
    # A model made without a row is its class's own provider's.
    assert OpenAIModel("gpt-4o").row is modelspec.BY_NAME["openai"]
