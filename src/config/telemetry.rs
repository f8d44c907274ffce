//! The `opentelemetry` section, in the MSC telemetry schema shared with the Python
//! client: `metrics.{attributes[], reader, exporter}`.
//!
//! Metrics are an add-on, so a provider or exporter type msfs does not implement is
//! a warning, not a reason to refuse the mount.

use std::time::Duration;

use super::defaults as d;
use super::error::ConfigError;
use super::raw;
use super::reader::{Place, Section, WITHOUT_EFFECT, read};
use super::scalar::{OptScalar, Whole};
use super::types::{
    AttributeProvider, AttributeSource, MetricsReaderConfig, OtlpExporterConfig, TelemetryConfig,
};

pub(super) fn parse_telemetry(
    otel: raw::OpenTelemetry,
    at: &Place<'_>,
    warnings: &mut Vec<String>,
) -> Result<Option<TelemetryConfig>, ConfigError> {
    let Some(Section(metrics)) = otel.metrics else {
        return Ok(None);
    };
    let at = at.child("metrics");
    let mut attributes = Vec::new();
    for (i, Section(item)) in metrics
        .attributes
        .unwrap_or_default()
        .into_iter()
        .enumerate()
    {
        if let Some(provider) = parse_attribute_provider(item, &at.item("attributes", i), warnings)?
        {
            attributes.push(provider);
        }
    }
    let reader = parse_reader(
        metrics.reader.value().unwrap_or_default(),
        &at.child("reader"),
        warnings,
    )?;
    let exporter = match metrics.exporter {
        Some(Section(e)) => parse_exporter(e, &at.child("exporter"), warnings)?,
        None => None,
    };
    Ok(Some(TelemetryConfig {
        attributes,
        reader,
        exporter,
    }))
}

fn parse_attribute_provider(
    raw: raw::AttributeProvider,
    at: &Place<'_>,
    warnings: &mut Vec<String>,
) -> Result<Option<AttributeProvider>, ConfigError> {
    let kind = at.required("type", raw.kind)?;
    let source = match kind.as_str() {
        "static" => AttributeSource::Static,
        "host" => AttributeSource::Host,
        "process" => AttributeSource::Process,
        "environment_variables" => AttributeSource::EnvironmentVariables,
        other => {
            warnings.push(at.warning(
                "type",
                &format!(
                    "attribute provider {other:?} is not supported by msfs (supported: static, host, process, environment_variables), ignored"
                ),
            ));
            return Ok(None);
        }
    };
    let options: raw::AttributeOptions = match raw.options {
        Some(tree) => read(tree, &at.child("options"), &[], warnings)?,
        None => Default::default(),
    };
    let attributes = options
        .attributes
        .unwrap_or_default()
        .into_iter()
        .map(|(name, value)| (name, value.0))
        .collect();
    Ok(Some(AttributeProvider { source, attributes }))
}

fn parse_reader(
    raw: raw::Reader,
    at: &Place<'_>,
    warnings: &mut Vec<String>,
) -> Result<MetricsReaderConfig, ConfigError> {
    let kind = at.text_or("type", raw.kind, "periodic")?;
    // The Python client calls its collect/export reader "diperiodic"; same options.
    if kind != "periodic" && kind != "diperiodic" {
        return Err(at.invalid(
            "type",
            format!("unknown reader type {kind:?}; expected periodic"),
        ));
    }
    let o = raw.options.value().unwrap_or_default();
    let options = at.child("options");
    // The Python client collects into its own buffer between exports; msfs's reader collects
    // the live instruments in-process at each export, so neither key has anything to govern.
    for (key, given) in [
        (
            "collect_interval_millis",
            o.collect_interval_millis.is_some(),
        ),
        ("collect_timeout_millis", o.collect_timeout_millis.is_some()),
    ] {
        if given {
            warnings.push(options.warning(
                key,
                &format!(
                    "{WITHOUT_EFFECT}: msfs collects its metrics in-process at each export \
                     (export_interval_millis, bounded by export_timeout_millis)"
                ),
            ));
        }
    }
    let ms = |given: Option<Whole<u64>>, default| Duration::from_millis(given.value_or(default));
    let config = MetricsReaderConfig {
        export_interval: ms(o.export_interval_millis, d::OTEL_EXPORT_INTERVAL_MS),
        export_timeout: ms(o.export_timeout_millis, d::OTEL_EXPORT_TIMEOUT_MS),
    };
    if config.export_interval.is_zero() {
        return Err(options.invalid("export_interval_millis", "must be greater than 0"));
    }
    Ok(config)
}

fn parse_exporter(
    raw: raw::Exporter,
    at: &Place<'_>,
    warnings: &mut Vec<String>,
) -> Result<Option<OtlpExporterConfig>, ConfigError> {
    let kind = at.required("type", raw.kind)?;
    if kind != "otlp" {
        warnings.push(at.warning(
            "type",
            &format!("exporter {kind:?} is not supported by msfs (supported: otlp); metrics will not be exported"),
        ));
        return Ok(None);
    }
    let at = at.child("options");
    let o: raw::ExporterOptions = match raw.options {
        Some(tree) => read(tree, &at, &[], warnings)?,
        None => Default::default(),
    };
    Ok(Some(OtlpExporterConfig {
        endpoint: at.required("endpoint", o.endpoint)?,
        insecure: o.insecure.value_or(false),
    }))
}
