//! Extractors whose rejections speak problem+json, naming what was wrong with the input.
//!
//! Use these instead of axum's `Json`, `Path` and `Query` in every handler: axum's own rejections are
//! plain text and would break the one error format.

use axum::extract::FromRequest;
use axum::extract::FromRequestParts;
use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use domain::Code;

use crate::error::ApiError;

/// A JSON body (`axum::Json` with problem+json rejections). Also a JSON answer.
#[derive(Debug, Clone, Copy, Default, FromRequest)]
#[from_request(via(axum::Json), rejection(ApiError))]
pub struct Json<T>(pub T);

impl<T: serde::Serialize> IntoResponse for Json<T> {
    fn into_response(self) -> Response {
        axum::Json(self.0).into_response()
    }
}

/// Path parameters (`axum::extract::Path` with problem+json rejections).
#[derive(Debug, Clone, Copy, Default, FromRequestParts)]
#[from_request(via(axum::extract::Path), rejection(ApiError))]
pub struct Path<T>(pub T);

/// Query parameters (`axum::extract::Query` with problem+json rejections).
#[derive(Debug, Clone, Copy, Default, FromRequestParts)]
#[from_request(via(axum::extract::Query), rejection(ApiError))]
pub struct Query<T>(pub T);

impl From<JsonRejection> for ApiError {
    fn from(rejection: JsonRejection) -> Self {
        let status = rejection.status();
        let detail = match &rejection {
            JsonRejection::MissingJsonContentType(_) => {
                "body: expected Content-Type: application/json".to_string()
            }
            // serde's message names the field and the rule (`missing field `name` at line 1 column 2`).
            _ => format!("body: {}", rejection.body_text()),
        };
        let err = ApiError::from_code(Code::InvalidArgument, detail);
        if status == StatusCode::PAYLOAD_TOO_LARGE || status == StatusCode::UNSUPPORTED_MEDIA_TYPE {
            err.with_http_status(status)
        } else {
            err
        }
    }
}

impl From<PathRejection> for ApiError {
    fn from(rejection: PathRejection) -> Self {
        ApiError::from_code(
            Code::InvalidArgument,
            format!("path: {}", rejection.body_text()),
        )
    }
}

impl From<QueryRejection> for ApiError {
    fn from(rejection: QueryRejection) -> Self {
        ApiError::from_code(
            Code::InvalidArgument,
            format!("query: {}", rejection.body_text()),
        )
    }
}
