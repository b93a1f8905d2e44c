#version 450
// A triangle turning about the centre; the angle is the frame's push constant.
layout(push_constant) uniform Frame {
  float angle;
} frame;
layout(location = 0) out vec3 color;

void main() {
  const vec2 corners[3] = vec2[](vec2(0.0, -0.8), vec2(0.7, 0.6), vec2(-0.7, 0.6));
  const vec3 colors[3] = vec3[](vec3(1.0, 0.2, 0.2), vec3(0.2, 1.0, 0.2), vec3(0.2, 0.2, 1.0));
  const float s = sin(frame.angle), c = cos(frame.angle);
  const vec2 p = corners[gl_VertexIndex];
  gl_Position = vec4(c * p.x - s * p.y, s * p.x + c * p.y, 0.0, 1.0);
  color = colors[gl_VertexIndex];
}
