"""Export the fitted cost models to ONNX with skl2onnx."""

from __future__ import annotations

import onnx
from skl2onnx import convert_sklearn
from skl2onnx.common.data_types import FloatTensorType, Int64TensorType

from rps_serve.cost import features as cols
from rps_serve.cost.classifier import RequestClassifier
from rps_serve.cost.estimator import ImpactEstimator

FEATURES_INPUT = "features"
COST_TENSOR = "cost"
LEVEL_OUTPUT = "class_level"
DISTANCES_OUTPUT = "distances"
TARGET_OPSET = 17
NUM_CLASSES_KEY = "rps.num_classes"


def estimator_to_onnx(estimator: ImpactEstimator) -> onnx.ModelProto:
    """features float32 [n, 3] -> cost float32 [n, 3]."""
    model: onnx.ModelProto = convert_sklearn(
        estimator.to_sklearn(),
        name="impact_estimator",
        initial_types=[(FEATURES_INPUT, FloatTensorType([None, cols.NUM_FEATURES]))],
        final_types=[(COST_TENSOR, FloatTensorType([None, cols.NUM_COST_COLUMNS]))],
        target_opset=TARGET_OPSET,
    )
    return model


def classifier_to_onnx(classifier: RequestClassifier) -> onnx.ModelProto:
    """cost float32 [n, 3] -> class_level int64 [n], distances float32 [n, k]."""
    model: onnx.ModelProto = convert_sklearn(
        classifier.pipeline_,
        name="request_classifier",
        initial_types=[(COST_TENSOR, FloatTensorType([None, cols.NUM_COST_COLUMNS]))],
        final_types=[
            (LEVEL_OUTPUT, Int64TensorType([None])),
            (DISTANCES_OUTPUT, FloatTensorType([None, classifier.num_classes])),
        ],
        target_opset=TARGET_OPSET,
    )
    onnx.helper.set_model_props(model, {NUM_CLASSES_KEY: str(classifier.num_classes)})
    return model
