//! The `opentelemetry` section, in the MSC telemetry schema shared with the Python
//! client: `metrics.{attributes[], reader, exporter}`.
//!
//! Metrics are an add-on, so a provider or exporter type msfs does not implement is
//! a warning, not a reason to refuse the mount.

use super::defaults as d;
use super::error::ConfigError;
use super::reader::Section;
use super::types::{
    AttributeProvider, AttributeSource, MetricsReaderConfig, OtlpExporterConfig, TelemetryConfig,
};

pub(super) fn parse_telemetry(
    mut otel: Section<'_>,
    warnings: &mut Vec<String>,
) -> Result<Option<TelemetryConfig>, ConfigError> {
    let Some(mut metrics) = otel.opt_section("metrics")? else {
        otel.finish(warnings);
        return Ok(None);
    };
    let mut attributes = Vec::new();
    for (path, value) in metrics.opt_list("attributes")?.unwrap_or_default() {
        let mut item = metrics.item(path, value)?;
        if let Some(provider) = parse_attribute_provider(&mut item, warnings)? {
            attributes.push(provider);
        }
        item.finish(warnings);
    }
    let reader = parse_reader(metrics.section_or_empty("reader")?, warnings)?;
    let exporter = match metrics.opt_section("exporter")? {
        Some(e) => parse_exporter(e, warnings)?,
        None => None,
    };
    metrics.finish(warnings);
    otel.finish(warnings);
    Ok(Some(TelemetryConfig {
        attributes,
        reader,
        exporter,
    }))
}

fn parse_attribute_provider(
    item: &mut Section<'_>,
    warnings: &mut Vec<String>,
) -> Result<Option<AttributeProvider>, ConfigError> {
    let kind = item.req_str("type")?;
    let source = match kind.as_str() {
        "static" => AttributeSource::Static,
        "host" => AttributeSource::Host,
        "process" => AttributeSource::Process,
        "environment_variables" => AttributeSource::EnvironmentVariables,
        other => {
            item.ignore("options");
            warnings.push(item.warning(
                "type",
                &format!(
                    "attribute provider {other:?} is not supported by msfs (supported: static, host, process, environment_variables), ignored"
                ),
            ));
            return Ok(None);
        }
    };
    let mut options = item.section_or_empty("options")?;
    let attributes = options.string_map("attributes")?;
    options.finish(warnings);
    Ok(Some(AttributeProvider { source, attributes }))
}

fn parse_reader(
    mut reader: Section<'_>,
    warnings: &mut Vec<String>,
) -> Result<MetricsReaderConfig, ConfigError> {
    let kind = reader.str_or("type", "periodic")?;
    // The Python client calls its collect/export reader "diperiodic"; same options.
    if kind != "periodic" && kind != "diperiodic" {
        return Err(reader.invalid(
            "type",
            format!("unknown reader type {kind:?}; expected periodic"),
        ));
    }
    let mut o = reader.section_or_empty("options")?;
    let config = MetricsReaderConfig {
        collect_interval: o.ms_or("collect_interval_millis", d::OTEL_COLLECT_INTERVAL_MS)?,
        collect_timeout: o.ms_or("collect_timeout_millis", d::OTEL_COLLECT_TIMEOUT_MS)?,
        export_interval: o.ms_or("export_interval_millis", d::OTEL_EXPORT_INTERVAL_MS)?,
        export_timeout: o.ms_or("export_timeout_millis", d::OTEL_EXPORT_TIMEOUT_MS)?,
    };
    for (key, value) in [
        ("collect_interval_millis", config.collect_interval),
        ("export_interval_millis", config.export_interval),
    ] {
        if value.is_zero() {
            return Err(o.invalid(key, "must be greater than 0"));
        }
    }
    o.finish(warnings);
    reader.finish(warnings);
    Ok(config)
}

fn parse_exporter(
    mut exporter: Section<'_>,
    warnings: &mut Vec<String>,
) -> Result<Option<OtlpExporterConfig>, ConfigError> {
    let kind = exporter.req_str("type")?;
    if kind != "otlp" {
        exporter.ignore("options");
        warnings.push(exporter.warning(
            "type",
            &format!("exporter {kind:?} is not supported by msfs (supported: otlp); metrics will not be exported"),
        ));
        exporter.finish(warnings);
        return Ok(None);
    }
    let mut o = exporter.section_or_empty("options")?;
    let config = OtlpExporterConfig {
        endpoint: o.req_str("endpoint")?,
        insecure: o.bool_or("insecure", false)?,
    };
    o.finish(warnings);
    exporter.finish(warnings);
    Ok(Some(config))
}
